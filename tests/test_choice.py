"""choice: the extractive reader's selection rule, called directly on literal pieces whose
scores can be checked by hand."""

from __future__ import annotations

import dataclasses

import pytest

from ragline.answer import choice
from ragline.answer.choice import (
    ChoiceWeights,
    Scored,
    asks,
    balanced,
    bridges,
    choose,
    clip_items,
    continued,
    first_sentence,
    fit_list,
    fit_row,
    holds_asked,
    pmi_rescore,
    rank,
    relative,
    rescore,
    select,
    span_choice,
    with_antecedent,
    with_claims,
    with_first_step,
    with_leads,
    with_remedy,
)
from ragline.answer.context import Piece
from ragline.text import leads_in

WIDE = ChoiceWeights(headings=0.3, cue=0.3, dense=0.3, rank=0.15, keep=0.35, most=3, budget=60)


def sentence(block: int, position: int, text: str, group: int = 1) -> Piece:
    return Piece(block, position, text, "sentence", group)


def item(block: int, position: int, text: str, group: int = 2) -> Piece:
    return Piece(block, position, text, "item", group)


def scored(*pairs: tuple[float, Piece]) -> list[Scored]:
    return [Scored(score, piece) for score, piece in pairs]


# --------------------------------------------------------------------------- rank and rescore


def test_rank_adds_the_terms_the_headings_the_cue_and_the_block_rank():
    a = sentence(1, 0, "The sweep starts nightly.")
    b = sentence(2, 0, "The sweep is slow.")
    weights = {"sweep": 2.0, "nightly": 1.0}
    ranked, matched = rank("sweep nightly", weights, [a, b], {1: set(), 2: {"nightly"}}, None, WIDE)
    # a: (2 + 1) / 3 + 0.15 / 1; b: 2 / 3 + 0.3 * 1 / 3 (its heading) + 0.15 / 2
    assert [s.piece for s in ranked] == [a, b]
    assert [s.score for s in ranked] == pytest.approx([1.15, 2 / 3 + 0.1 + 0.075])
    assert matched == pytest.approx(1.0)  # the best of terms and headings, without cue and rank


def test_rank_without_headings_leaves_them_out_and_a_cue_weighs_in():
    a = sentence(1, 0, "The sweep runs.")
    b = sentence(1, 1, "The sweep runs at 02:00 UTC.")
    ranked, _ = rank("When does the sweep run?", {"sweep": 1.0, "run": 1.0}, [a, b], None, "time", WIDE)
    assert [s.piece for s in ranked] == [b, a]  # the clock time is what "when" asks for
    assert ranked[0].score == pytest.approx(1.0 + 0.3 * 1.0 + 0.15)
    assert ranked[1].score == pytest.approx(1.0 + 0.15)


def test_rank_breaks_ties_by_block_then_position_and_reports_no_match():
    late = sentence(2, 5, "Nothing here.")
    early = sentence(1, 3, "Nothing there.")
    first = sentence(1, 1, "Nothing at all.")
    ranked, matched = rank("sweep", {"sweep": 1.0}, [late, early, first], None, None, WIDE)
    assert [s.piece for s in ranked] == [first, early, late]
    assert matched == 0.0


def test_a_nested_item_is_ranked_with_its_parent_items_words():
    # "2. Estimation: - High: 3 days", "3. Remediation: - High: 10 days": which "High" is asked
    # about is in the parent; a list's lead-in sentence is no parent and lends nothing
    intro = sentence(1, 0, "Our SLAs for each step, in business days:")
    estimation, remediation = item(1, 1, "2. Estimation:"), item(1, 3, "3. Remediation:")
    high_e = Piece(1, 2, "- High: 3 days", "item", 3, lead=1)
    high_r = Piece(1, 4, "- High: 10 days", "item", 4, lead=3)
    under_intro = Piece(1, 5, "- High: 2 days", "item", 5, lead=0)
    weights = {"remediation": 1.0, "sla": 1.0, "high": 1.0}
    ranked, _ = rank("remediation SLA for high", weights, [intro, estimation, high_e, remediation, high_r, under_intro], None, None, WIDE)
    assert ranked[0].piece == high_r
    by_piece = {s.piece: s.score for s in ranked}
    assert by_piece[high_e] == pytest.approx(by_piece[under_intro])  # "sla" of the lead-in sentence is not lent
    assert by_piece[high_r] > by_piece[remediation]


def test_rescore_adds_to_the_pool_only_and_ranks_it_again():
    a, b, c = sentence(1, 0, "a a"), sentence(1, 1, "b b"), sentence(2, 0, "c c")
    ranked = scored((1.0, a), (0.9, b), (0.5, c))
    out = rescore(ranked, [0.0, 1.0], 0.3)
    assert [s.piece for s in out] == [b, a, c]
    assert [s.score for s in out] == pytest.approx([1.2, 1.0, 0.5])  # c, outside the pool, is untouched


# --------------------------------------------------------------------------- choose


def test_choose_keeps_pieces_within_keep_most_and_budget():
    best, near, far = sentence(2, 0, "one two three"), sentence(1, 4, "four five"), sentence(1, 1, "six seven")
    ranked = scored((1.0, best), (0.5, near), (0.3, far))
    assert choose(ranked, [best, near, far], "q", None, WIDE) == [best, near]  # 0.3 < 0.35 of the best
    tight = dataclasses.replace(WIDE, budget=4)
    long = sentence(1, 2, "a piece of many words")
    short = sentence(1, 3, "ok")
    ranked = scored((1.0, best), (0.9, long), (0.8, short))
    assert choose(ranked, [best, long, short], "q", None, tight) == [best, short]  # the long one is over the budget
    most = dataclasses.replace(WIDE, most=1)
    assert choose(ranked, [best, long, short], "q", None, most) == [best]


def test_an_item_over_the_budget_is_quoted_as_its_first_sentence():
    best = sentence(1, 0, "We have the pick label for urgent code.")  # 8 words
    long = item(2, 0, "- Labelled requests are cherry-picked into the branch. Every hour a task runs again to pick the rest.")
    tight = dataclasses.replace(WIDE, budget=16)
    out = choose(scored((1.0, best), (0.9, long)), [best, long], "q", None, tight)
    assert out == [best, dataclasses.replace(long, text="- Labelled requests are cherry-picked into the branch.")]  # the step
    assert choose(scored((1.0, best), (0.9, long)), [best, long], "q", None, WIDE) == [best, long]  # within the budget: whole
    exact = dataclasses.replace(WIDE, budget=len(best.text.split()) + len(long.text.split()))
    assert choose(scored((1.0, best), (0.9, long)), [best, long], "q", None, exact) == [best, long]  # exactly the budget: whole
    # a code block ranked between is passed over, not the end of the choice
    code = Piece(1, 1, "```\nmake all\n```", "code", 3)
    after = sentence(1, 2, "Then wait.")
    assert choose(scored((1.0, best), (0.9, code), (0.8, after)), [best, code, after], "q", None, WIDE) == [best, after]
    # the step keeps the item's score: it can lead as the piece holding what is asked
    days = item(2, 1, "- Backups are kept for 30 days. The cleanup job deletes older ones every night at two.")
    other = sentence(3, 0, "Logs are kept for 7 days.")
    roomy = dataclasses.replace(WIDE, budget=22)  # the step and the other fit beside the best, the whole item does not
    out = choose(scored((1.0, best), (0.9, days), (0.8, other)), [best, days, other], "how many days are backups kept?", "number", roomy)
    assert out == [dataclasses.replace(days, text="- Backups are kept for 30 days."), best, other]
    # a first sentence that asks, or holds code fenced or a link cut open, is no step: the item is left out, as before
    for text in (
        "- Is a rollback available? Ask the release managers first, then roll back.",
        "- Run ```make all```. Then wait for the build to finish before you go on.",
        "- Read [the guide. It](https://x/y) says how, in many more words than fit here.",
    ):
        asked = dataclasses.replace(long, text=text)
        assert len(first_sentence(text).split()) <= 6  # the first sentence alone would fit
        assert choose(scored((1.0, best), (0.9, asked)), [best, asked], "q", None, dataclasses.replace(WIDE, budget=14)) == [best], text
    # a sentence over the budget is not cut
    prose = sentence(2, 0, "Labelled requests are cherry-picked into the branch. Every hour a task runs again to pick the rest.")
    assert choose(scored((1.0, best), (0.9, prose)), [best, prose], "q", None, tight) == [best]


def test_an_items_step_names_more_than_a_number_or_a_picture():
    assert choice.item_step(item(1, 0, "- Step 1. Tag the release branch and sign the tag with the release key.")) is None
    assert choice.item_step(item(1, 0, "- ![Release flow of the billing service](/r.png). The tag is made from the branch.")) is None
    assert choice.item_step(item(1, 0, "- Tag the release branch with the version.")) is None  # one sentence: the whole item
    assert choice.item_step(item(1, 0, "- Run the build with ```make all``` first. Then wait for it to finish.")) is None  # code
    step = choice.item_step(item(1, 0, "- Tag the branch. Then sign it."))
    assert step is not None and step.text == "- Tag the branch."


def test_a_place_of_a_block_is_quoted_once():
    whole = item(1, 2, "- Retention is set per store. It is 30 days for each store.")
    step = dataclasses.replace(whole, text="- Retention is set per store.")
    other = sentence(1, 0, "Backups are kept in the vault.")
    assert choice.once([whole, other, step]) == [whole, other]
    assert choice.once([step, other, whole]) == [step, other]
    # end to end: the piece holding the asked number is the whole item whose step was chosen first
    best = sentence(1, 0, "Backups of the billing service are kept in the archive vault of the billing service.")
    ranked = scored((0.9, best), (0.6, whole))
    out = select(ranked, [best, whole], [best, whole], "How many days are backups kept?", "number", dataclasses.replace(WIDE, budget=24))
    assert [(p.block, p.position) for p in out] == [(1, 2), (1, 0)] and out[0] == whole


def test_a_picture_is_no_piece_to_quote():
    assert choice.pictures(sentence(1, 0, "![GitLab.com deployment process](/images/deploy.png)"))
    assert choice.pictures(sentence(1, 0, "[![Build status](https://b/x.svg)](https://b/pipeline)"))
    assert not choice.pictures(sentence(1, 0, "See ![the diagram](/d.png) for the flow."))  # words of its own
    assert choice.pictures(item(1, 0, "- ![logo](/l.png)"))  # an item that is only a picture too
    assert choice.pictures(sentence(1, 0, '![a](u "A (draft)")'))  # a title with parentheses
    assert choice.pictures(sentence(1, 0, "![Deployment process overview][deploy]"))  # by reference
    assert choice.pictures(sentence(1, 0, "![a](/x.png){: .shadow}"))  # a kramdown attribute list
    assert choice.pictures(sentence(1, 0, "[![a](/x.svg)](/p) [![b](/y.svg)](/q)"))  # a line of badges
    assert not choice.pictures(sentence(1, 0, "![a](/x.png) shows the flow."))


def test_choose_puts_the_lead_first_and_the_rest_in_handbook_order():
    best, later, earlier = sentence(1, 0, "lead piece"), sentence(2, 0, "from block two"), sentence(1, 5, "later in one")
    ranked = scored((1.0, best), (0.9, later), (0.8, earlier))
    assert choose(ranked, [best, later, earlier], "q", None, WIDE) == [best, earlier, later]


def test_a_steps_question_gets_the_whole_list_in_its_order():
    intro = sentence(1, 0, "Do this:", group=1)
    steps = [item(1, 1, "First step here"), item(1, 2, "Second step here"), item(1, 3, "Third step here")]
    other = item(2, 0, "Another list", group=7)
    ranked = scored((1.0, steps[2]), (0.9, intro), (0.5, steps[0]))
    assert choose(ranked, [intro, *steps, other], "How do I deploy?", "steps", WIDE) == steps


def test_a_steps_list_over_its_words_is_quoted_in_part_the_answering_step_kept():
    words = " ".join(["word"] * 30)
    steps = [item(1, i, f"{i}. Step {i}. More {words}") for i in range(1, 6)]
    tight = dataclasses.replace(WIDE, listed=40)
    ranked = scored((1.0, steps[3]), (0.5, steps[0]))
    quoted = choose(ranked, steps, "How do I deploy?", "steps", tight)
    assert [p.text for p in quoted] == [f"{i}. Step {i}." for i in range(1, 6)]  # each step's first sentence: 15 words
    tighter = dataclasses.replace(WIDE, listed=9)
    assert [p.position for p in choose(ranked, steps, "How do I deploy?", "steps", tighter)] == [1, 2, 4]  # 3 + 3 fit, and 4 answers


def test_fit_list_leaves_nested_detail_out_before_it_cuts_items():
    parent = Piece(1, 0, "1. Open the tracker", "item", 2)
    nested = [Piece(1, k, f"1. Detail {k} of the step with many words in it", "item", 2, lead=0) for k in (1, 2)]
    last = Piece(1, 3, "2. Submit it", "item", 2)
    every = [parent, *nested, last]
    assert fit_list(every, 100) == every
    assert fit_list(every, 12) == [parent, last]
    assert fit_list(every, 12, nested[1]) == [parent, last]  # a nested item kept stands for its parent


def test_a_steps_list_in_part_stays_in_part_through_select():
    parent = Piece(1, 0, "1. In the body, be sure to:", "item", 2)
    nested = [Piece(1, k, f"1. Detail {k} of the step with many words in it", "item", 2, lead=0) for k in (1, 2)]
    last = Piece(1, 3, "2. Submit it", "item", 2)
    every = [parent, *nested, last]
    tight = dataclasses.replace(WIDE, listed=12)
    ranked = scored((1.0, last), (0.5, parent))
    # the parent ends in a colon, but its list is the one quoted, in part: its nested items do not come back
    assert select(ranked, every, every, "How do I file it?", "steps", tight) == [parent, last]


def test_a_steps_list_cut_to_its_best_step_keeps_it_through_select():
    lead = item(1, 0, "1. Before you start, be sure to:")
    steps = [item(1, i, f"{i + 1}. Step {i + 1} " + " ".join(["word"] * 8)) for i in range(1, 5)]
    every = [lead, *steps]
    tight = dataclasses.replace(WIDE, listed=20)
    ranked = scored((1.0, steps[3]), (0.5, lead))
    # within 20 words: the first item (7) and the best (10); read as a lead-in, the list would lose the best
    assert select(ranked, every, every, "How do I deploy?", "steps", tight) == [lead, steps[3]]


def test_items_chosen_on_score_are_no_list_quoted_a_colon_item_still_brings_its_detail():
    lead = item(1, 0, "- Deploys need:")
    nested = [Piece(1, 1, "- a green build", "item", 2, lead=0), Piece(1, 2, "- an approval from the owning team", "item", 2, lead=0)]
    other = item(1, 3, "- Rollbacks are manual.")
    every = [lead, *nested, other]
    ranked = scored((1.0, lead), (0.9, other))
    assert select(ranked, every, every, "What do deploys need?", None, WIDE) == [
        lead,
        *nested,
        other,
    ]  # no steps cue: the lead brings its list


def test_a_colon_step_inside_a_quoted_list_neither_brings_its_detail_nor_goes():
    first = item(1, 0, "1. Open the tracker")
    colon = item(1, 1, "2. In the body, be sure to:")
    detail = Piece(1, 2, "1. A detail of the second step with many words in it", "item", 2, lead=1)
    last = item(1, 3, "3. Submit it")
    every = [first, colon, detail, last]
    tight = dataclasses.replace(WIDE, listed=14)
    assert continued([first, colon, last], every, tight, as_list=True) == [first, colon, last]
    assert continued([first, colon, last], every, dataclasses.replace(WIDE, listed=100), as_list=True) == [first, colon, last]


def test_fit_list_takes_a_list_of_exactly_its_words_whole():
    items = [item(1, i, "one two three four five") for i in range(4)]
    assert fit_list(items, 20) == items
    nested = [item(1, 0, "1. one two three"), Piece(1, 1, "1. four five six seven", "item", 2, lead=0), item(1, 2, "2. a b c")]
    assert fit_list(nested, 8) == [nested[0], nested[2]]  # the top-level items, 8 words exactly
    long = [item(1, 0, "1. Step one. More here"), item(1, 1, "2. Step two. More here")]
    assert [p.text for p in fit_list(long, 6)] == ["1. Step one.", "2. Step two."]  # first sentences, 6 words exactly


def test_later_lead_ins_share_the_words_a_list_may_take():
    best = sentence(1, 0, "one two three four", group=1)
    lead_a, items_a = sentence(2, 0, "First these:", group=1), [item(2, 1, "alpha beta gamma")]
    lead_b, items_b = sentence(3, 0, "Then these:", group=1), [item(3, 1, "delta epsilon zeta")]
    every = [best, lead_a, *items_a, lead_b, *items_b]
    # 4 + 2 + 2 words chosen, then 3 (11 in all), then 3 more (14): the second list fits 14 exactly, not 13
    assert continued([best, lead_a, lead_b], every, dataclasses.replace(WIDE, listed=13)) == [best, lead_a, *items_a]
    assert continued([best, lead_a, lead_b], every, dataclasses.replace(WIDE, listed=14)) == [best, lead_a, *items_a, lead_b, *items_b]


def test_a_chosen_item_a_lead_in_brings_is_counted_once():
    best = sentence(1, 0, "one two three four", group=1)
    lead_a = sentence(2, 0, "First these:", group=1)
    x, y = item(2, 1, "alpha beta gamma"), item(2, 2, "eta theta iota")
    lead_b, items_b = sentence(3, 0, "Then these:", group=1), [item(3, 1, "delta epsilon zeta")]
    every = [best, lead_a, x, y, lead_b, *items_b]
    # 4 + 2 + 3 + 2 words chosen (x among them), then y: 14; x is not counted twice
    assert continued([best, lead_a, x, lead_b], every, dataclasses.replace(WIDE, listed=14)) == [best, lead_a, x, y]


def test_a_lead_in_left_out_gives_back_its_words():
    best = sentence(1, 0, "one two three four", group=1)
    lead_a, items_a = sentence(2, 0, "First these:", group=1), [item(2, 1, "a b c d e")]
    lead_b, items_b = sentence(3, 0, "Then these:", group=1), [item(3, 1, "delta epsilon zeta")]
    every = [best, lead_a, *items_a, lead_b, *items_b]
    # 8 chosen; the first list (5) does not fit 9, its lead-in goes (6 left), the second list (3) fits 9 exactly
    assert continued([best, lead_a, lead_b], every, dataclasses.replace(WIDE, listed=9)) == [best, lead_b, *items_b]
    # at 8: the first lead-in gives back its 2 words (6 left), not more; 6 + 3 is over 8, so the second goes too
    assert continued([best, lead_a, lead_b], every, dataclasses.replace(WIDE, listed=8)) == [best]


def test_a_steps_list_too_long_for_its_first_sentences_names_every_step_clipped():
    words = " ".join(["word"] * 20)
    steps = [item(1, i, f"{i + 1}. Step {i + 1} {words}") for i in range(4)]  # 23 words each, no sentence end
    steps[2] = item(1, 2, f"3. Step 3 {words} ``` gcloud auth login ```")  # and a command: 28
    clipped = fit_list(steps, 49)  # ten words and an ellipsis a step (11, 11, 11 + 5, 11): 49 exactly
    assert [p.position for p in clipped] == [0, 1, 2, 3]  # every step, none left out
    assert clipped[0].text == "1. Step 1 " + " ".join(["word"] * 7) + " …"
    assert clipped[2].text.endswith("… ``` gcloud auth login ```")  # its prose clipped, its command whole
    kept = fit_list(steps, 61, keep=steps[1])  # the step that answers best whole (23), the others clipped (38)
    assert [p.text for p in kept][1] == steps[1].text and [p.position for p in kept] == [0, 1, 2, 3]
    # under ten words a step it cannot be done: the steps from the first, as before
    assert fit_list(steps, 60, keep=steps[1]) == steps[:2]
    assert fit_list(steps, 48) == steps[:2]


def test_a_step_with_commands_keeps_each_and_is_clipped_only_when_long():
    short = item(1, 0, "1. Run ``` make ``` then check it")  # 5 words of prose: nothing to clip
    two = item(1, 1, "2. Build ``` make build ``` and then ship it today ``` make ship ```")  # 7 words of prose
    words = " ".join(["word"] * 12)
    long = item(1, 2, f"3. Deploy {words}")
    out = fit_list([short, two, long], 34)  # 8 + 15 + 14 = 37 words: the long step clipped to 11
    assert out[0] == short and out[1] == two  # within ten words of prose: as written, every command kept
    assert out[2].text == "3. Deploy " + " ".join(["word"] * 8) + " …"
    after = item(1, 3, "4. Run ``` make ``` " + words)
    assert fit_list([after, long], 20)[0].text == "4. Run ``` make ``` …"  # the prose after the command left out, said so


def test_a_clipped_step_never_cuts_a_link_open():
    step = item(1, 0, "5. Read [the guide to incidents and paging people on call today](guide.md) first")  # 13 words
    other = item(1, 1, "6. Page")
    assert [p.text for p in fit_list([step, other], 13)] == ["5. Read …", "6. Page"]


def test_a_clipped_step_is_cut_where_no_span_is_open_not_by_counting_brackets():
    sad = item(1, 0, "5. If the deploy broke :( roll it back with the runbook and tell the channel")  # 15 words
    other = item(1, 1, "6. Page")
    assert [p.text for p in fit_list([sad, other], 13)] == ["5. If the deploy broke :( roll it back with …", "6. Page"]
    assert balanced("[the guide](x.md) and `[` and a (b)") and balanced("it broke :(")
    assert not any(balanced(t) for t in ("[the guide", "[the guide](x", "[a](b(c)d", "run `make"))


def test_fit_list_keeps_one_item_when_even_the_first_does_not_fit():
    long = [item(1, i, " ".join(["word"] * 30)) for i in range(3)]
    assert fit_list(long, 10) == long[:1]


def test_a_code_block_is_quoted_alone():
    code = Piece(1, 0, "```\nmake deploy\n```", "code", 1)
    ranked = scored((1.0, code), (0.99, sentence(1, 1, "then run it")))
    assert choose(ranked, [code], "q", "code", WIDE) == [code]


def test_a_piece_holding_what_is_asked_leads():
    a, b = sentence(1, 0, "The sweep settles payouts."), sentence(1, 1, "It is owned by payments.")
    clock = sentence(3, 0, "The sweep runs at 02:00 UTC.")
    ranked = scored((1.0, a), (0.9, b), (0.6, clock))
    assert choose(ranked, [a, b, clock], "When does the sweep run?", "time", WIDE) == [clock, a, b]


def test_a_piece_holding_what_is_asked_joins_from_below_keep_if_it_scores_half_the_best():
    strict = dataclasses.replace(WIDE, keep=0.95)  # nothing but the best is kept on score alone
    a, b = sentence(1, 0, "The sweep settles payouts."), sentence(1, 1, "It is owned by payments.")
    clock = sentence(3, 0, "The sweep runs at 02:00 UTC.")
    assert choose(scored((1.0, a), (0.9, b), (0.6, clock)), [a, b, clock], "When does the sweep run?", "time", strict) == [clock, a]
    assert choose(scored((1.0, a), (0.9, b), (0.4, clock)), [a, b, clock], "When does the sweep run?", "time", strict) == [a]


def test_the_joining_piece_replaces_the_last_when_the_answer_is_full():
    a, b, c = sentence(1, 0, "alpha beta"), sentence(1, 1, "gamma delta"), sentence(1, 2, "epsilon zeta")
    clock = sentence(2, 0, "It starts at 02:00.")
    ranked = scored((1.0, a), (0.9, b), (0.8, c), (0.7, clock))
    assert choose(ranked, [a, b, c, clock], "When?", "time", WIDE) == [clock, a, b]


def test_holds_asked_wants_the_quantity_the_question_names():
    assert holds_asked("number", sentence(1, 0, "Keep logs for 14 days."), "How many days are logs kept?")
    assert not holds_asked("number", sentence(1, 0, "Keep 14 logs."), "How many days are logs kept?")
    assert not holds_asked("number", sentence(1, 0, "Keep logs for 14 days."), "Are 14 days enough, how many days?")
    assert holds_asked("time", sentence(1, 0, "At 02:00."), "When?")
    assert not holds_asked("steps", item(1, 0, "a step"), "How do I?")  # only time, duration, number and name


# --------------------------------------------------------------------------- continued and select


def test_a_sentence_ending_in_a_colon_brings_its_list():
    lead = sentence(1, 0, "Our core languages are:", group=1)
    items = [item(1, 1, "Go and more"), item(1, 2, "Python and more")]
    after = sentence(1, 3, "Something else entirely.", group=3)
    assert continued([lead], [lead, *items, after]) == [lead, *items]


def test_a_lead_in_in_emphasis_brings_its_list_too():
    lead = sentence(1, 0, "**Process overview:**", group=1)
    items = [item(1, 1, "Open an issue here"), item(1, 2, "Ask for a review here")]
    assert continued([lead], [lead, *items]) == [lead, *items]
    texts = ("Then run:", "**Then run:**", "***Then run:***  ", "Then run: **now**", "Run it.", "Name:______")
    assert [leads_in(t) for t in texts] == [True, True, True, False, False, False]


def test_an_announcing_sentence_brings_the_list_after_its_paragraph():
    lead = sentence(1, 0, "There are several tools in use.", group=1)
    more = sentence(1, 1, "Each has an owner.", group=1)
    items = [item(1, 2, "Tool one here"), item(1, 3, "Tool two here")]
    assert continued([lead], [lead, more, *items]) == [lead, *items]
    plain = sentence(1, 0, "Tools are in use.", group=1)  # announces nothing
    assert continued([plain], [plain, more, *items]) == [plain]


def test_continued_stays_in_its_block_and_never_repeats():
    lead = sentence(1, 0, "Then run:", group=1)
    code = Piece(1, 1, "```\nmake\n```", "code", 2)
    elsewhere = Piece(2, 0, "```\nother\n```", "code", 1)
    assert continued([lead, code], [lead, code, elsewhere]) == [lead, code]


def test_a_lead_in_to_a_lead_in_brings_the_command_after_both():
    lead = sentence(1, 0, "Before the rollback, check the migration number:", group=1)
    inner = sentence(1, 1, "Without namespace:", group=2)
    code = Piece(1, 2, "```\npsql -c 'SELECT * FROM schema_migrations'\n```", "code", 3)
    rest = sentence(1, 3, "With a namespace, name it.", group=4)
    assert continued([lead], [lead, inner, code, rest]) == [lead, inner, code]
    prose = sentence(1, 1, "Without a namespace it is simpler.", group=2)  # no lead-in: what follows it is not brought
    assert continued([lead], [lead, prose, code, rest]) == [lead, prose]
    assert continued([lead], [lead, inner, code, rest], WIDE) == [lead, inner, code]
    huge = Piece(1, 2, "```\n" + "psql -c 'SELECT 1'\n" * 40 + "```", "code", 3)  # past the words a list may take
    assert continued([lead], [lead, inner, huge, rest], WIDE) == [lead, inner]


def test_select_quotes_the_lead_alone_when_it_brings_its_list():
    lead = sentence(1, 0, "Deploys need:", group=1)
    items = [item(1, 1, "A green build here"), item(1, 2, "An approval here")]
    other = sentence(2, 0, "Unrelated second piece.", group=1)
    ranked = scored((1.0, lead), (0.9, other))
    assert select(ranked, [lead, *items, other], [lead, *items, other], "What do deploys need?", None, WIDE) == [lead, *items]
    alone = sentence(1, 0, "Deploys need a build.", group=1)
    ranked = scored((1.0, alone), (0.9, other))
    assert select(ranked, [alone, other], [alone, other], "What do deploys need?", None, WIDE) == [alone, other]


def test_a_later_lead_in_brings_its_list_only_within_the_words_a_list_may_take():
    best = sentence(1, 0, "Deploys need a green build and an approval from the owning team first.", group=1)
    lead = sentence(2, 0, "The approvers are:", group=1)
    items = [item(2, 1, "The owning team lead"), item(2, 2, "Any staff engineer")]
    every = [best, lead, *items]
    assert continued([best, lead], every, WIDE) == [best, lead, *items]  # 13 + 3 + 7 words <= 100
    tight = dataclasses.replace(WIDE, listed=20)
    assert continued([best, lead], every, tight) == [best]  # the list does not fit, and "are:" says nothing alone
    announce = sentence(2, 0, "There are several approvers.", group=1)
    assert continued([best, announce], [best, announce, *items], tight) == [best, announce]
    assert continued([best, lead], every) == [best, lead, *items]  # without weights: unbounded, as before


def test_the_first_lead_in_brings_its_list_within_the_words_a_list_may_take():
    lead = sentence(1, 0, "Do these:", group=1)
    items = [item(1, i, f"Item {i} " + " ".join(["word"] * 20)) for i in range(1, 6)]
    tight = dataclasses.replace(WIDE, listed=50)
    assert continued([lead], [lead, *items], tight) == [lead, *items[:2]]


# --------------------------------------------------------------------------- leads and lower blocks


def test_an_item_comes_after_the_lead_in_that_carries_the_questions_condition():
    lead = sentence(1, 0, "To be clear, the following cases are not an emergency:", group=1)
    items = [
        Piece(1, 1, "- Wanting to launch this week.", "item", 2, lead=0),
        Piece(1, 2, "- Rolling back a CL that broke the build.", "item", 2, lead=0),
    ]
    every = [lead, *items]
    assert with_leads([items[1]], every, "Is rolling back a CL that broke the build an emergency?") == [lead, items[1]]
    plain = sentence(1, 0, "Examples:", group=1)  # carries nothing the question asks about
    assert with_leads([items[1]], [plain, *items], "Is rolling back a CL that broke the build an emergency?") == [items[1]]
    nested = Piece(1, 3, "- only for hotfixes", "item", 2, lead=2)  # a nested item's lead is its parent item
    assert with_leads([nested], [*every, nested], "When is rolling back allowed?") == [items[1], nested]
    assert with_leads([lead, items[1]], every, "emergency rolling back?") == [lead, items[1]]  # never twice


def test_an_item_that_finishes_its_lead_ins_sentence_comes_after_it():
    """ "You should use <https://vdp...> in either:" then "- the origin for your site's security.txt":
    the item alone leaves out what to use; an item that is a sentence of its own needs no lead."""
    lead = sentence(1, 0, "You should use <https://vdp.example/security.txt> in either:", group=1)
    fragment = Piece(1, 1, "- the origin for your site's `/.well-known/security.txt`", "item", 2, lead=0)
    whole = Piece(1, 2, "- Host your own /.well-known/security.txt on your site.", "item", 2, lead=0)
    question = "How should I set up /.well-known/security.txt on my site?"
    assert with_leads([fragment], [lead, fragment, whole], question) == [lead, fragment]
    assert with_leads([whole], [lead, fragment, whole], question) == [whole]


def test_a_list_answers_a_steps_question_less_the_lower_its_block():
    """The steps cue's weight is divided by the block's rank: a list further down does not outrank
    the first block's sentence on the cue alone."""
    first = sentence(1, 0, "Respond at once with why the change should not go in.")
    listed = item(4, 0, "- Why the change is made.")
    ranked, _ = rank("how do I turn down a change", {"change": 1.0}, [first, listed], None, "steps", WIDE)
    assert [s.piece for s in ranked] == [first, listed]
    assert [s.score for s in ranked] == pytest.approx([1.0 + 0.15, 1.0 + 0.3 / 4 + 0.15 / 4])


def test_nothing_from_a_lower_block_joins_a_best_piece_that_holds_what_is_asked():
    best = sentence(1, 0, "The sweep runs at 23:40 IST.")
    lower, same = sentence(2, 0, "Sweeps are logged by the platform."), sentence(1, 1, "It closes the batch.")
    ranked = scored((1.0, best), (0.9, lower), (0.8, same))
    assert choose(ranked, [best, lower, same], "When does the sweep run?", "time", WIDE) == [best, same]
    vague = sentence(1, 0, "The sweep closes the batch.")  # holds no time: a lower block may still help
    ranked = scored((1.0, vague), (0.9, lower), (0.8, same))
    assert choose(ranked, [vague, lower, same], "When does the sweep run?", "time", WIDE) == [vague, same, lower]


def test_a_judgement_joins_relative_to_the_best_judged_piece():
    assert relative([0.02, 0.01, 0.005]) == [1.0, 0.5, 0.25]
    assert relative([0.0, 0.0]) == [0.0, 0.0] and relative([]) == []


def test_span_choice_scales_each_term_among_the_candidates():
    from ragline.answer.choice import span_choice

    # extractive 1.0 / 0.8 (of a best of 0.5), PMI scaled 0 / 1 (of -2 .. 2): weight 0.1 leaves the extractive best
    assert span_choice([0.5, 0.4], [-2.0, 2.0], 0.1) == 0
    assert span_choice([0.5, 0.4], [-2.0, 2.0], 0.3) == 1  # 1.0 against 0.8 + 0.3
    # three candidates: the PMI scaled by its range, not its value (-1 .. 3: 0, 0.5, 1)
    assert span_choice([1.0, 0.9, 0.5], [-1.0, 1.0, 3.0], 0.4) == 1  # 1.0, 1.1, 0.9
    assert span_choice([0.0, 0.0], [1.0, 2.0], 1.0) == 1  # no extractive score: the PMI alone
    assert span_choice([0.0, 0.0], [2.0, 2.0], 1.0) == 0  # nothing to tell them apart: the first
    with pytest.raises(ValueError, match="no candidate spans"):
        span_choice([], [], 1.0)


def test_a_question_the_handbook_asks_is_no_answer():
    """Issue 40, item 15: "When does the settlement sweep run [1]?" quoted as the answer. A sentence
    that is a question is not a candidate (unless nothing else is); a list of questions is content."""
    assert asks(sentence(1, 1, "Does this change even make sense?"))
    assert asks(sentence(1, 1, 'Bad: "Why did you use threads here?"'))
    assert not asks(sentence(1, 1, "Ask why it is here."))
    assert not asks(item(1, 1, "What can go wrong?"))


# --------------------------------------------------------------------------- a long table row (issue 39, item 4)

_FILLER = " ".join(f"Background sentence {i} about the history of the programme and its many stakeholders." for i in range(25))
_ROW = Piece(
    1,
    0,
    f"Rewards | {_FILLER} | Points are paid out quarterly through the payroll system. | Contact the people team.",
    "row",
    0,
    header="Programme | History | Payout | Questions",
)


def test_a_long_row_is_quoted_in_the_part_that_answers():
    from ragline.answer.citations import quoted

    assert len(quoted(_ROW.text, _ROW.kind, _ROW.header).split()) > 300  # the row as it stands
    fitted = fit_row(_ROW, "How are reward points paid out?", 60)
    shown = quoted(fitted.text, fitted.kind, fitted.header)
    assert shown == "Programme: Rewards | Payout: Points are paid out quarterly through the payroll system."
    assert len(shown.split()) <= 60


def test_a_row_that_fits_and_other_pieces_are_left_alone():
    short = Piece(1, 0, "P1 | 20 minutes", "row", 0, header="Priority | Response")
    assert fit_row(short, "How fast is a P1 answered?", 60) is short
    prose = Piece(1, 0, _FILLER, "sentence", 0)
    assert fit_row(prose, "history", 10) is prose
    ragged = dataclasses.replace(_ROW, header="Programme | History")  # header and cells disagree: quoted as it is
    assert fit_row(ragged, "payout", 60) is ragged


def test_a_cell_too_long_for_the_room_is_cut_to_its_first_sentences():
    fitted = fit_row(_ROW, "What is the history of the programme?", 40)
    names = fitted.header.split(" | ")
    assert names == ["Programme", "History"]  # the row's name, then the one cell that answers
    cell = fitted.text.split(" | ")[1]
    assert cell.startswith("Background sentence 0") and cell.endswith("stakeholders.")  # whole sentences
    assert sum(len(n.split()) + len(c.split()) for n, c in zip(names, fitted.text.split(" | "), strict=True)) <= 40
    words = fit_row(dataclasses.replace(_ROW, text=_ROW.text.replace(".", ",")), "What is the history of the programme?", 40)
    assert words.text.split(" | ")[1].endswith(" …")  # no sentence fits: the first words, and an ellipsis


def test_the_cell_holding_most_of_the_question_comes_first_when_room_is_short():
    row = Piece(
        1,
        0,
        "Rewards | Ask the people team about points and payroll. | Points reach you quarterly through payroll as a bonus payment.",
        "row",
        0,
        header="Programme | Questions | Payout",
    )
    fitted = fit_row(row, "When do points reach me through payroll as a bonus?", 14)
    assert fitted.header == "Programme | Payout"  # the Questions cell shares two terms, the Payout cell more


def test_an_example_brings_the_claim_it_illustrates():
    claim = sentence(1, 0, "The first line is written as an order (an imperative sentence).")
    example = sentence(1, 1, 'For example, say "Delete the RPC" instead of "Deleting the RPC".')
    other = sentence(1, 2, "The rest need not be.", group=2)
    later = sentence(2, 0, "e.g. a later paragraph's example", group=1)
    every = [claim, example, other, later]
    assert with_claims([example], every) == [claim, example]
    assert with_claims([claim, example], every) == [claim, example]  # quoted once
    assert with_claims([other], every) == [other]  # no example: nothing brought
    assert with_claims([later], every) == [later]  # first of its block: nothing before it
    opens = sentence(1, 3, "For example, a paragraph of its own.", group=3)
    assert with_claims([opens], [claim, example, other, opens]) == [opens]  # what ends another paragraph is no claim of it
    eg = sentence(1, 1, "E.g. a card that is declined twice.")
    assert with_claims([eg], [claim, eg]) == [claim, eg]
    through = select(scored((1.0, example), (0.1, other)), every, every, "How is the first line written?", None, WIDE)
    assert through[:2] == [claim, example]


# --------------------------------------------------------------------------- the rules after the choice, at their edges


def test_bridges_needs_a_pointing_lead_in_and_then_a_list_or_a_table() -> None:
    c = sentence(1, 0, "Some changes need a second reviewer.")
    lead = sentence(1, 1, "This applies when the following holds:")
    rows = Piece(1, 2, "Owners | two", "row", 2)
    assert bridges(c, [lead, item(1, 2, "- the change touches billing")])  # a lead-in and one item: enough
    assert bridges(c, [lead, rows])  # a table's row as well as a list's item
    assert bridges(c, [lead, item(1, 2, "- billing"), sentence(1, 3, "More prose.", group=3)])  # what follows the item: no matter
    assert not bridges(c, [lead])  # a lead-in with nothing after it
    assert not bridges(c, [lead, sentence(1, 2, "Prose, not a list.", group=3)])


def test_with_antecedent_names_the_heading_once_and_only_where_it_names_something() -> None:
    first = sentence(1, 0, "This deployment is our main dogfooding instance.")
    later = sentence(2, 0, "Feedback goes to a channel.")
    named = with_antecedent([first, later], {1: ["Instances", "S2 host:"]})
    assert [p.text for p in named] == ["S2 host: This deployment is our main dogfooding instance.", later.text]  # one colon
    for says in ("Use the S2 host.", "Deploy to S2 now!", "Is S2 up?"):  # a heading that says or asks names nothing
        assert with_antecedent([first], {1: [says]}) == [first]
    assert with_antecedent([first], {1: ["Mac OS X"]})[0].text == "Mac OS X: This deployment is our main dogfooding instance."
    holds = sentence(1, 0, "This S2 Host deployment is our main instance.")
    assert with_antecedent([holds], {1: ["s2 HOST"]}) == [holds]  # it names the heading already, in any case


def test_with_antecedent_leads_a_list_its_section_opens_with_by_the_heading() -> None:
    group = item(1, 0, "- Google group to be added to: gcp-admin-escalated")  # group 2: the part after the heading line
    ops = item(1, 1, "- Tech Ops will add you to the google group")
    head = {1: ["GCP access", "Procedure for requesting escalated permission for incident response:"]}
    led = with_antecedent([ops, group], head)
    lead = "Procedure for requesting escalated permission for incident response:"
    assert led[0] == Piece(1, 1, lead, "sentence", 2)  # a sentence of the block, in its first quote's place and list
    assert led[1:] == [ops, group]  # the heading leads, the items follow as they were
    later = Piece(1, 2, ops.text, "item", 3)  # a list after prose, or after a lead-in that is no piece ("Prerequisites:")
    assert with_antecedent([later], head) == [later]
    assert with_antecedent([ops], {}) == [ops]  # a later chunk of the section: no heading to lead with
    for says in ("Why do we ask?", "Step 1. Install the agent"):  # a heading that asks, or says more than a name
        assert with_antecedent([ops], {1: [says]}) == [ops]
    assert with_antecedent([ops], {1: ["Tech Ops"]}) == [ops]  # the item names the heading already


def test_with_remedy_at_its_edges() -> None:
    first = sentence(1, 0, "The risk is a title.")  # 5 words
    fix = sentence(1, 1, "The simplest fix is a variable.")  # 6 words
    assert with_remedy([], [first, fix], 60) == []
    advice_item = item(1, 1, "You should rotate the key.")
    assert with_remedy([first], [first, advice_item], 60) == [first]  # a list item after it is no sentence of its paragraph
    other = sentence(2, 0, "Titles come from users.")  # 4 words: 5 + 6 + 4 = 15
    assert with_remedy([first, other], [first, fix, other], 15) == [first, fix, other]  # exactly the budget: all stay
    assert with_remedy([first, other], [first, fix, other], 14) == [first, fix]
    kept, gone = sentence(2, 0, "Titles come.", group=1), sentence(3, 0, "Users type titles.", group=1)  # 2 and 3 words
    # 5 + 6 + 2 + 3 = 16 over 14: only the last block's piece goes, the one before it stays
    assert with_remedy([first, kept, gone], [first, fix, kept, gone], 14) == [first, fix, kept]
    dangling = sentence(2, 0, "Then run:")
    assert with_remedy([first, dangling], [first, fix, dangling], 60) == [first, dangling]  # it would end on a lead-in


def test_a_cell_is_cut_to_whole_sentences_or_to_words_with_an_ellipsis() -> None:
    assert choice._cut("one two three four five", 2) == ""  # under three words: nothing worth quoting
    assert choice._cut("one two three four five", 3) == "one two …"
    assert choice._cut("alpha beta gamma delta epsilon", 4) == "alpha beta gamma …"
    assert choice._cut("One two three. Four five six.", 3) == "One two three."  # a sentence of exactly `most` words
    assert choice._cut("One two. Three four. Five six seven.", 4) == "One two. Three four."


def test_first_sentence_and_balanced_at_their_edges() -> None:
    assert first_sentence("- Rotate the key. Then tell the team.") == "- Rotate the key."
    assert first_sentence("- Rotate the key.") == "- Rotate the key."
    assert first_sentence("") == ""
    assert balanced("[the guide](x_(y)_z.md)")  # parentheses inside a link's target close as they open
    assert not balanced("[a [b]")  # two link texts open, one closed


def _words(n: int, stem: str = "w") -> str:
    return " ".join(f"{stem}{i}" for i in range(1, n + 1))


def test_clip_items_at_its_edges() -> None:
    long = item(1, 1, "- " + _words(19))  # 20 words of prose
    fenced = item(1, 0, "- " + _words(7) + " ```gcloud auth login``` then wait")  # prose 8 + 2 = 10 words, 13 in all
    got = clip_items([fenced, long], 24)  # 13 + (k + 1) <= 24: k = 10
    assert got is not None and got[0].text == fenced.text  # its prose is k words exactly: left as it is
    assert got[1].text == "- " + _words(9) + " …"
    head = item(1, 0, "- " + _words(9) + " ```make test``` and wait")  # a head of exactly k words, then a command, then prose
    got = clip_items([head, long], 24)
    assert got is not None and got[0].text == "- " + _words(9) + " ```make test``` …"  # the prose after the command goes
    linked = item(1, 0, "[Read " + _words(14, "x") + "](x.md) and more")
    got = clip_items([linked, long], 22)
    assert got is not None and got[0].text == "[Read …"  # never cut inside the link: back to its first word, no further
    cut_then_command = item(1, 0, "- " + _words(14) + " ```make test``` and wait")
    got = clip_items([cut_then_command, long], 25)  # (k + 1 + 2) + (k + 1) <= 25: k = 10
    assert got is not None and got[0].text == "- " + _words(9) + " … ```make test```"  # one ellipsis, where the cut is
    assert clip_items([fenced, long], 33) == [fenced, long]  # exactly `most` words: nothing clipped
    lead = sentence(1, 0, "Steps for the whole release of the service, one after another, each in turn:")
    assert clip_items([lead], 3) is None  # no item to clip: no cut fits


def test_fit_row_at_its_edges() -> None:
    row = Piece(1, 0, "Payouts | weekly on Fridays | by bank transfer", "row", 1, header="Kind | When | How")
    assert fit_row(row, "when are payouts made", 10) is row  # 1+1 + 1+3 + 1+3 = 10 words: exactly `most`
    assert fit_row(row, "when are payouts made", 9).text == "Payouts | weekly on Fridays"
    whole = Piece(1, 0, "Payouts | weekly | by bank", "row", 1, header="Kind | When | How")
    assert fit_row(whole, "when", 7) is whole  # 2 + 2 + 3 = 7: exactly `most`
    gap = Piece(1, 0, "Payouts |  | weekly | by bank transfer", "row", 1, header="Kind | Note | When | How")
    assert fit_row(gap, "zebra", 5).text == "Payouts | weekly"  # no cell holds a term: in order, the empty one passed over
    exact = Piece(1, 0, "Payouts | weekly | by bank transfer", "row", 1, header="Kind | When | How")
    assert fit_row(exact, "zebra", 4).text == "Payouts | weekly"  # a cell that fills the room exactly stays whole
    named = Piece(1, 0, "Payouts weekly | Fridays at noon | by transfer", "row", 1, header="Kind | Day | How")
    assert fit_row(named, "payouts weekly fridays", 7).text == "Payouts weekly | Fridays at noon"  # the first cell once
    cut = Piece(1, 0, "Payouts | runs weekly on every Friday of the month | bank", "row", 1, header="Kind | When | How")
    assert fit_row(cut, "when weekly bank", 8).text == "Payouts | runs weekly on every …"  # after a cut, no room grows back


def test_choose_at_its_edges() -> None:
    best, tie = sentence(1, 0, "one two three"), sentence(1, 1, "four five")
    assert choose(scored((1.0, best), (0.35, tie)), [best, tie], "q", None, WIDE) == [best, tie]  # exactly `keep` of the best
    double = scored((2.0, best), (0.5, tie))
    assert choose(double, [best, tie], "q", None, WIDE) == [best]  # 0.5 is under 0.35 x 2.0
    code = Piece(1, 2, "make test", "code", 3)
    assert choose(scored((1.0, best), (0.9, code)), [best, code], "q", None, WIDE) == [best]  # code is never a further piece
    a, b = sentence(2, 0, "six seven eight"), sentence(3, 0, "nine ten eleven")  # 3 + 3 + 3 = 9 words
    tight = dataclasses.replace(WIDE, budget=7)
    assert choose(scored((1.0, best), (0.9, a), (0.8, b)), [best, a, b], "q", None, tight) == [best, a]  # the words add up


def test_choose_brings_the_piece_holding_the_number_at_its_edges() -> None:
    q = "How many days do refunds take?"
    best = sentence(1, 0, "Refunds take 5 days to reach the card.")
    s2, s3 = sentence(1, 1, "Refunds are common."), sentence(1, 2, "Refunds go back to the card.")
    got = choose(scored((1.0, best), (0.9, s2), (0.8, s3)), [best, s2, s3], q, "number", WIDE)
    assert got == [best, s2, s3]  # the best holds it: nothing is swapped in, nothing twice
    top, held = sentence(1, 0, "Refunds reach the card."), sentence(2, 0, "It takes 5 days.")
    assert choose(scored((1.0, top), (0.5, held)), [top, held], q, "number", WIDE) == [held, top]  # above `keep`: it joins, and leads
    assert choose(scored((2.0, top), (0.5, held)), [top, held], q, "number", WIDE) == [top]  # a quarter: it does not
    alone = dataclasses.replace(WIDE, most=1)
    assert choose(scored((1.0, top), (0.5, held)), [top, held], q, "number", alone) == [held]  # exactly half: it takes the place
    other = sentence(3, 0, "It takes 9 days abroad.")
    got = choose(scored((1.0, top), (0.6, held), (0.6, other)), [top, held, other], q, "number", WIDE)
    assert got[0] == held  # tied pieces holding it: the first ranked leads


def test_continued_at_its_edges() -> None:
    lead, code = sentence(1, 0, "Then run:"), Piece(1, 1, "make deploy", "code", 2)
    other = sentence(2, 0, "Deploys are logged.")
    assert continued([lead, code, other], [lead, code, other]) == [lead, code, other]  # a piece brought already: the next goes on
    last = sentence(1, 0, "Then run:")  # a lead-in with nothing after it in its block
    intro, r1, r2 = sentence(2, 0, "Regions are:"), item(2, 1, "- eu-west-2"), item(2, 2, "- us-east-1")
    assert continued([last, intro], [last, intro, r1, r2]) == [last, intro, r1, r2]
    step = item(3, 0, "- Run:", group=5)
    fenced = Piece(3, 1, "make test", "code", 6)
    assert continued([step], [step, fenced]) == [step, fenced]  # an item leading in brings its command by default
    assert continued([step], [step, fenced], as_list=True) == [step]  # an item of the list quoted as the answer: no more
    then, open_, save = sentence(5, 0, "Then do this:"), sentence(5, 1, "Open the page.", group=2), sentence(5, 2, "Save.", group=2)
    assert continued([then], [then, open_, save]) == [then, open_]  # a sentence it leads in to: that one, not its paragraph
    check, without = sentence(4, 0, "Check the number:"), sentence(4, 1, "Without namespace:", group=2)
    assert continued([check], [check, without]) == [check, without]  # a lead-in to a lead-in, nothing after: itself
    cmd = Piece(4, 2, "kubectl get pods", "code", 3)
    assert continued([check], [check, without, cmd]) == [check, without, cmd]  # the command it leads in to comes along
    exact = dataclasses.replace(WIDE, listed=8)  # 3 + 2 + 3 words: exactly `listed`
    assert continued([check], [check, without, cmd], exact) == [check, without, cmd]
    assert continued([check], [check, without, cmd], dataclasses.replace(WIDE, listed=7)) == [check, without]


def test_continued_brings_a_table_an_announcing_sentence_points_at() -> None:
    says = sentence(1, 0, "The following regions hold data.")
    rows = [Piece(1, i, f"r{i} | region number {i} in the list here", "row", 2, header="Code | Name") for i in (1, 2, 3)]
    assert continued([says], [says, *rows]) == [says, *rows]  # every row of the table
    tight = dataclasses.replace(WIDE, listed=20)  # rows of 9 words (the bars count), fitted alone: two fit
    assert continued([says], [says, *rows], tight) == [says, *rows[:2]]


def test_continued_leaves_a_long_lists_nested_details_out_first() -> None:
    intro = sentence(1, 0, "Do this:")
    one, d1 = item(1, 1, "- Step one"), Piece(1, 2, "- detail a b c d e f", "item", 2, lead=1)
    two, d2 = item(1, 3, "- Step two"), Piece(1, 4, "- detail g h i j k l", "item", 2, lead=3)
    tight = dataclasses.replace(WIDE, listed=20)  # the list is 3 + 8 + 3 + 8 = 22 words: the details go
    assert continued([intro], [intro, one, d1, two, d2], tight) == [intro, one, two]


def test_scores_and_values_of_other_lengths_are_an_error_not_a_silent_cut() -> None:
    a, b = sentence(1, 0, "a a"), sentence(1, 1, "b b")
    with pytest.raises(ValueError):
        rescore(scored((1.0, a)), [0.1, 0.2], 0.3)
    with pytest.raises(ValueError):
        pmi_rescore(scored((1.0, a), (0.9, b)), [a, b], [0.1], 0.3)
    with pytest.raises(ValueError):
        span_choice([1.0, 0.5], [0.1], 0.3)
    with pytest.raises(ValueError, match="^no candidate spans$"):
        span_choice([], [], 0.3)


def test_holds_asked_reads_durations_and_names_too() -> None:
    assert holds_asked("duration", sentence(1, 0, "Refunds take 5 days."), "How long do refunds take?")
    assert holds_asked("name", sentence(1, 0, "Use Splunk for that."), "Which tool stores logs?")
    assert not holds_asked("steps", sentence(1, 0, "Use Splunk for that."), "How do I store logs?")


def test_rank_reads_the_cue_against_the_question_and_only_steps_and_advice_by_block() -> None:
    restated = sentence(1, 0, "Our SLO is 99.9% for the API.")
    ranked, _ = rank("If our SLO is 99.9%, how much downtime is that?", {"slo": 1.0}, [restated], None, "number", WIDE)
    assert ranked[0].score == pytest.approx(1.0 + 0.15)  # the number it states is the question's own: no cue
    late = sentence(2, 0, "The sweep runs at 02:00.")
    ranked, _ = rank("When does the sweep run?", {"sweep": 1.0}, [late], None, "time", WIDE)
    assert ranked[0].score == pytest.approx(1.0 + 0.3 + 0.15 / 2)  # a time in block 2 counts whole: only steps, advice fall


def test_select_at_its_edges() -> None:
    lead, code = sentence(1, 0, "Then run:"), Piece(1, 1, "make deploy", "code", 2)
    other = sentence(2, 0, "Deploys are logged in the channel.")
    ranked = scored((1.0, lead), (0.9, other))
    assert select(ranked, [lead, code, other], [lead, other], "how do I deploy", None, WIDE) == [lead, code]  # alone
    intro = sentence(3, 0, "Do these:")
    steps = [item(3, i, f"- step {i} " + " ".join(["word"] * 8)) for i in range(1, 5)]  # 11 words each
    tight = dataclasses.replace(WIDE, listed=25)
    got = select(scored((1.0, intro)), [intro, *steps], [intro], "what do I do", None, tight)
    assert got[0] == intro and len(got) < 5  # the list is cut to `listed`
    row = Piece(4, 0, "Payouts | weekly on every Friday of the month | by bank transfer", "row", 1, header="Kind | When | How")
    got = select(scored((1.0, row)), [row], [row], "when are payouts", None, dataclasses.replace(WIDE, budget=8))
    assert got[0].text != row.text  # a row over the budget is cut to the cells that answer


def test_fit_list_at_its_edges() -> None:
    p1, p2, p3 = item(1, 1, "- Step one"), item(1, 2, "- Step two"), item(1, 4, "- Step three")
    n3 = Piece(1, 5, "- detail x y z", "item", 2, lead=4)
    assert fit_list([p1, p2, p3], 9) == [p1, p2, p3]  # exactly `most`
    assert fit_list([p1, p2, p3, n3], 9) == [p1, p2, p3]  # the nested detail goes first; the rest is exactly `most`
    assert fit_list([p1, p2, p3, n3], 6, keep=n3) == [p1, p3]  # the detail that answers keeps its parent step
    assert fit_list([p1, p2, p3], 6) == [p1, p2]  # from the first, as many as fit
    two = [item(1, 1, "- Step one. Then more."), item(1, 2, "- Step two. Then more.")]
    assert [p.text for p in fit_list(two, 6)] == ["- Step one.", "- Step two."]  # first sentences: exactly `most`
    detailed = [item(1, 1, "- Step one"), Piece(1, 2, "- detail x y z", "item", 2, lead=1)]
    assert fit_list(detailed, 8) == detailed  # exactly `most`, details and all: nothing left out
    two_sentences = [item(1, 1, "- Step one. Then more."), Piece(1, 2, "- x", "item", 2, lead=1)]
    assert fit_list(two_sentences, 5) == two_sentences[:1]  # its top-level items are exactly `most`: whole, not cut
    n1 = Piece(1, 3, "- detail of the first step", "item", 2, lead=0)  # its parent is not among the items given
    assert fit_list([n1, p2], 3, items_at={0, 2, 3}) == [p2]  # the positions given say it is a detail


def test_with_first_step_needs_the_blocks_first_piece() -> None:
    quoted = [item(1, 2, "- Run the tests.")]
    assert with_first_step(quoted, quoted, {1}, 60) == quoted  # the block's first piece is not in the context: as it is
    order = sentence(1, 0, "Run `make test` in the folder of the service before you push a change today.")
    assert len(order.text.split()) == 15  # STEP_WORDS exactly
    assert with_first_step(quoted, [order, *quoted], {1}, 10) == [order, *quoted]  # past the budget: short, with code
    longer = sentence(1, 0, order.text.replace("today.", "today or tomorrow."))
    assert with_first_step(quoted, [longer, *quoted], {1}, 10) == quoted
    plain = sentence(1, 0, "Run the tests first.")  # 4 words beside the answer's 4: exactly a budget of 8
    assert with_first_step(quoted, [plain, *quoted], {1}, 8) == [plain, *quoted]
    assert with_first_step(quoted, [plain, *quoted], {1}, 7) == quoted


def test_clip_items_tries_the_largest_cut_first() -> None:
    fenced = item(1, 0, "- " + _words(3) + " ```make test``` " + _words(8, "t"))  # prose 4 + 8 = 12 words, 14 in all
    plain = item(1, 1, "- " + _words(10))  # 11 words
    got = clip_items([fenced, plain], 18)  # k = 11 cuts the prose after the command (7 words left), leaves the 11 alone: 18
    assert got is not None and [p.text for p in got] == ["- " + _words(3) + " ```make test``` …", plain.text]


def test_continued_counts_the_words_a_bridge_brings() -> None:
    said = sentence(1, 0, "one two three four", group=1)
    bridge, listed = sentence(1, 1, "This applies when:", group=1), item(1, 2, "alpha beta gamma")
    lead_b, items_b = sentence(2, 0, "Then these:", group=1), [item(2, 1, "delta epsilon zeta")]
    every = [said, bridge, listed, lead_b, *items_b]
    assert bridges(said, every[1:3])
    # 4 + 2 chosen, the bridge's 3 and its list's 3 (12), then 3 more: 15, over 14 (the bridge's words counted)
    assert continued([said, lead_b], every, dataclasses.replace(WIDE, listed=14)) == [said, bridge, listed]
    assert continued([said, lead_b], every, dataclasses.replace(WIDE, listed=15)) == [said, bridge, listed, lead_b, *items_b]


def test_an_items_own_details_are_the_first_to_go_when_it_leads_in_to_them() -> None:
    """A chosen item leading in to its nested items ("- Install these:") and later steps: over the bound, its
    details go first (their parent is the chosen item, not among the list brought, yet a list item of the
    block), and an item of another block at the lead-in's position makes no step a detail."""
    intro = sentence(1, 0, "Set up:", group=1)
    step = Piece(1, 1, "- Install these:", "item", 2, lead=0)
    d1 = Piece(1, 2, "- the compiler for the language", "item", 2, lead=1)  # 6 words
    d2 = Piece(1, 3, "- the linter and its many rules", "item", 2, lead=1)  # 7 words
    then = Piece(1, 4, "- Then run it", "item", 2, lead=0)  # 4 words
    elsewhere = Piece(2, 0, "- elsewhere", "item", 2)
    assert leads_in(step.text)
    every = [intro, step, d1, d2, then, elsewhere]
    assert continued([step], every, dataclasses.replace(WIDE, listed=10)) == [step, then]
    assert continued([step], every, dataclasses.replace(WIDE, listed=30)) == [step, d1, d2, then]  # room for all
    # fit_list on its own: the answering detail whose parent is not among the items is no item to keep
    assert fit_list([d1, d2, then], 5, keep=d1, items_at={1, 2, 3, 4}) == [then]
