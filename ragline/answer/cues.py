"""cues: what a question asks for, and whether the handbook could hold it.

A library, not a stage (rag_answer uses it): pure functions over strings.

- `question_cue`: the kind of answer a question asks for (code, steps, duration, time,
  number, name, definition, advice), and `cue_match`: how well a quotable piece holds it.
- `unknown_names`: the names in a question that an index never mentions (Gerrit, a CLA,
  NW-9999), the ground of the answer stage's "the handbook never mentions" refusal.
- `asked_quantity` and `holds_quantity`: the precise quantity a question asks for ("how many
  days") and whether a text holds one of that shape; `HOW_OFTEN`, a question after a frequency.
- `orders` and `STATES`: whether a sentence opens with what to do, or as a statement.
- How a quote reads: `plain` (markup out), `LINK_DEFINITION` (markup lines, never prose), `ANNOUNCES`
  (a sentence that leads in to the list after it).

    >>> question_cue("How long do refunds take?")
    'duration'
"""

from __future__ import annotations

import re
from typing import Any

import ragline.text

_CLOCK = re.compile(r"\b\d{1,2}:\d{2}\b|\bT\+\d+\b|\b(?:midnight|noon)\b", re.I)  # a time of day: the answer to "when"
# a count as a handbook writes one, in digits or in words (a digit run bounded: no quadratic scan of "1,1,1,...")
_COUNT = r"\d[\d,.]{0,30}|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|\w+teen|twenty|thirty|forty|fifty|sixty|ninety"
_UNIT = r"(?:second|minute|hour|day|night|week|fortnight|month|quarter|year)"
_PERIOD = re.compile(  # how often, not when: "daily", "quarterly", "every 12 months", "twice a year", "on a fortnightly basis"
    rf"\b(?:hourly|daily|nightly|weekly|fortnightly|monthly|quarterly|annually|yearly"
    rf"|every (?:other |few |(?:{_COUNT})[\s-]+)?{_UNIT}s?|(?:once|twice|(?:{_COUNT}) times) (?:a|an|per|each) {_UNIT})\b",
    re.I,
)
HOW_OFTEN = re.compile(r"\bhow often\b|\bhow frequently\b|\bwhat (?:is the )?(?:frequency|cadence)\b", re.I)
_DURATION = re.compile(
    rf"\b(?:{_COUNT})[\s-]+(?:business |calendar |working )?(?:seconds?|minutes?|hours?|days?|weeks?|months?|years?)\b",
    re.I,
)
NUMBER = re.compile(r"\b\d[\d,.]{0,30}\b")
_DEFINING = re.compile(r"\b(?:is|are|means|refers to|stands for|is called)\b", re.I)
_STEP_Q = re.compile(
    r"\bhow (?:do|can|should|would) (?:i|we|you)\b|\bhow to\b|\bsteps?\b|\bprocedure\b|\bwhat do (?:i|we|you) do\b|\brecover(?!y)\w*"
    r"|\banything (?:else )?(?:i|we) (?:should|need to|must|ought to) do\b"
    r"|\bwhat (?:do|does|would) (?:[\w'-]+\s+){1,4}?(?:need to do\b|have to do\b(?!\s+with\b))"
    r"|\bwhat (?:should|must) (?:[\w'-]+\s+){1,4}?do\b",
    re.I,
)
_CODE_Q = re.compile(r"\b(?:command|curl|payload|json|config|configuration|yaml|snippet|example request|request body|sample)\b", re.I)
_DURATION_Q = re.compile(
    r"\b(?:how long|how quickly|how soon|how fast|deadline|within|how many (?:days|hours|minutes|seconds)|retention|kept for|validity|valid for|time ?(?:window|frame|period|span)s?)\b",
    re.I,
)
_TIME_Q = re.compile(r"\b(?:when|what time|schedule|how often|how frequently)\b", re.I)
_AUXILIARY = r"can|could|should|shall|may|might|must|do|does|did|is|are|am|was|were|will|would|have|has"  # opens a yes/no
# "When is it OK to ...", "when two engineers argue, what ...", "When I spot a problem, am I expected to ...": a
# condition, not a time. A "when" asks for a time only where it opens the question and no other question word follows it.
_CONDITION_WHEN = re.compile(
    r"^\s*when (?:is it|are we|am i|do i need to|would)\b"
    rf"|^\s*when\b[^?]*,\s*(?:what|which|who|how|{_AUXILIARY})\b|\S\s+when\b",
    re.I,
)
_NAME_Q = re.compile(
    r"\b(?:which|what) (?:\w+ )?(?:tools?|services?|products?|software|librar(?:y|ies)|systems?|platforms?|languages?|frameworks?|apps?|providers?"
    r"|channels?|teams?|people|person|groups?|repositor(?:y|ies)|vendors?|databases?)\b|^\s*who\b|\bwho (?:do|should|can|owns|is|are|to)\b",
    re.I,
)
_NAME = re.compile(r"(?<!^)(?<![.!?]\s)\b[A-Z][\w.+-]*[A-Za-z0-9]|`[^`]+`")
_NUMBER_Q = re.compile(r"\b(?:how many|how much|minimum|maximum|limit|rate|threshold|smallest|largest)\b", re.I)
_DEFINITION_Q = re.compile(
    r"^\s*(?:what(?:'s| is| are| does)\b.*\b(?:mean|means|stand for)\b|what(?:'s| is| are) (?:a |an |the )?\S+\s*\??$)|^\s*\S*\d\S*\s*\??\s*$",
    re.I,
)

# What a question asks after it states a situation: whether ("can I just back it out?", "does our group just have to eat
# that?", "Am I allowed to ...?", "Ought we to ...?") or what to do ("what should we have done
# differently?"; "how should I ...?" asks for steps, `_STEP_Q`). "What's the escalation path?" asks for a thing, not
# for advice; so do "Is there a template for ...?" and "Do you have an example?" (but "Is there anything to watch out
# for?" asks what to do).
_ASKS_ADVICE = re.compile(
    r"^(?:(?:so|and|but|then)\s+)?(?:"
    r"(?!(?:is|are) there (?!anything\b)|(?:do|does) (?:you|we|they|it) have\b)"
    rf"(?:{_AUXILIARY}|ought|need)\b"
    r"|what (?:should|do|can|would) (?:i|we|you)\b)",
    re.I,
)
_OPENS_QUESTION = re.compile(  # a part of a question that is itself one ("Do you screen for fraud, and can ...?")
    rf"^(?:{_AUXILIARY}|what|which|who|whom|whose|how|why|where)\b",
    re.I,
)
_SITUATION_WORDS = 4  # the least words of a situation before the ask ("Months after a purchase, can a buyer ...")


def asks_advice(question: str) -> bool:
    """Whether a question states a situation, then asks whether or what to do in it: "my security fix was merged and
    now it has broken an unrelated feature. can I just back it out?", "If the whole region goes dark ..., what should
    we have done differently?". The ask is the question's last sentence (after its last ". ", "! ", "? ", " - " or
    " — "), or, in a one-sentence question, its last clause (after its last ", "): a yes/no question or what to do.
    The situation is what comes before it: four words at least, not itself a question ("Do you screen for fraud, and
    can that stop a payment?" asks two things). Its answer is the handbook's advice for a situation, not the
    sentences that restate the situation."""
    situation, ask = _situation_and_ask(question)
    if not question.rstrip().endswith("?"):
        return False
    return len(situation.split()) >= _SITUATION_WORDS and _OPENS_QUESTION.match(situation) is None and _ASKS_ADVICE.match(ask) is not None


def _situation_and_ask(question: str) -> tuple[str, str]:
    """A question's situation and its ask (`asks_advice`): the ask is its last sentence, or in a one-sentence question
    its last clause; the situation what comes before ("" for a question of one clause, which is all ask)."""
    q = " ".join(question.split()).rstrip()
    cut = max(q.rfind(". "), q.rfind("! "), q.rfind("? "), q.rfind(" - "), q.rfind(" — "))
    if cut < 0:
        cut = q.rfind(", ")
    return (q[:cut].strip(" -—"), q[cut + 1 :].strip(" -—")) if cut >= 0 else ("", q)


# A name in a question: a word (as `ragline.text.tokenize` splits them) that is capitalised without
# opening a sentence, or holds a digit, a capital inside or a joiner other than a hyphen
# (NW-4021, dependabot.yml, S3, defaultBranch). Plain numbers
# and quantities (50k, 200-line) are not names; neither are a few capitalised common words.
_NOT_NAMES = frozenset({"ok", "okay", "i", "faq", "asap", "fyi"})
# the days and months: capitalised by convention, not names of a thing the handbook must mention ("the usual
# release day lands on a Saturday" over a page that says "the next working day that isn't a Friday")
_CALENDAR = frozenset(
    "monday tuesday wednesday thursday friday saturday sunday january february march april may june july august"
    " september october november december".split()
)
_QUANTITY = re.compile(r"\d[\d,.]{0,30}(?:[kKmM]|-\w+)?")


def _is_name(word: str, before: str) -> bool:
    if word.casefold() in _NOT_NAMES | _CALENDAR or _QUANTITY.fullmatch(word):
        return False
    if ragline.text.identifier_like(word, hyphen=False):
        return True  # NW-4021, dependabot.yml, init.defaultBranch; not brand-new or top-level
    opens = not before.strip() or re.search(r"[.?!:][\s\"'(]*$", before) is not None
    return word[0].isupper() and not opens


def unknown_names(question: str, idf_source: Any) -> list[str]:
    """Names in the question (`_is_name`) whose whole term occurs nowhere in the index
    (`idf_source`: a `ragline.bm25.Bm25`, asked for `term_ids`).

    "Do you support Apple Pay?" over a handbook that never says Apple: ['Apple'].
    A name the handbook has, in any case (`marl`, `NW-5001`), is not unknown; NW-9999 is,
    though NW is not. A stopword (IT read as "it") is never indexed and never a name here.
    """
    unknown: list[str] = []
    for match in ragline.text.words(question):
        name = match.group()
        terms = ragline.text.tokenize(name)  # its whole form first
        if not terms or not _is_name(name, question[: match.start()]):
            continue
        _, ids = idf_source.term_ids(terms[:1])
        if int(ids[0]) < 0 and name not in unknown:
            unknown.append(name)
    return unknown


# An ask for leave or for whether something can be had ("Can we get a different threshold just for it?", "am I allowed
# to ...?", "is it possible to ...?"): a sentence granting or stating the ability answers it ("Custom Targets introduce
# the ability to set tailored Error Budget durations on individual endpoints", "You may use ..."), advice or not; and a
# limit or threshold it names is what it asks to change, not a number asked for. A request for something to be told is
# none ("Can you tell me the rate limit?", "Could someone tell me ...", "May I ask what the threshold is?").
_ASKS_LEAVE = re.compile(
    r"^\W*(?:(?:so|and|but|then)\s+)?(?:"
    r"(?:can|could|may) (?:i|we|they|my team|our team|our group)\b(?!\s+(?:please\s+)?(?:ask|know|see|find|learn|check|tell|hear)\b)"
    r"|(?:am|are|is) (?:i|we|they|it) (?:allowed|permitted)\b|is it (?:possible|ok|okay|fine|allowed)\b)",
    re.I,
)
# what grants or states an ability: "the ability to", "allowed", "you may"; not what might happen ("Latency may vary",
# "It is possible that the job times out"), nor "as soon as possible"
_PERMITS = re.compile(r"\b(?:ability to|able to|allow(?:s|ed|ing)?|permitted|possible to|free to|option to|you may)\b", re.I)


def asks_leave(question: str) -> bool:
    """Whether a question's ask (its last sentence, or a one-sentence question's last clause) asks whether the asker may
    do or have something (`_ASKS_LEAVE`), and what comes before it is no question of its own ("What is the maximum upload
    size, can I raise it?" asks for the size too)."""
    situation, ask = _situation_and_ask(question)
    return _ASKS_LEAVE.match(ask) is not None and _OPENS_QUESTION.match(situation) is None


def question_cue(question: str) -> str | None:
    """The kind of answer a question asks for.

    code (a command, payload or config), steps ("how do I", "recovery steps"),
    duration ("how long", "how quickly", "deadline", "what time window"), time ("when", "what time"),
    number ("how many", "limit"; not a limit a question asks leave to change, `asks_leave`: "Can we get a
    different threshold?"), name ("which tool", "what service"), definition
    ("what does X mean", "what is X", a bare identifier), or None. The first that
    matches, in that order; then advice (`asks_advice`: a situation, then whether or what to do in it).
    """
    q = question.strip()
    for cue, pattern in (
        ("code", _CODE_Q),
        ("steps", _STEP_Q),
        ("duration", _DURATION_Q),
        ("time", _TIME_Q),
        ("number", _NUMBER_Q),
        ("name", _NAME_Q),
        ("definition", _DEFINITION_Q),
    ):
        if (
            pattern.search(q)
            and not (cue == "time" and _CONDITION_WHEN.search(q) and not re.search(r"\b(?:what time|schedule|how often)\b", q, re.I))
            and not (cue == "number" and asks_leave(q) and not re.search(r"\bhow (?:many|much)\b", q, re.I))
        ):
            return cue
    return "advice" if asks_advice(q) else None


# --------------------------------------------------------------------------- the asked-for quantity

_NUMBER_WORD = (
    r"(?:\d[\d,.]{0,30}|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty|forty|fifty|sixty"
    r"|ninety|hundred|thousand|a few|several|a couple of|single|a|an)"
)
_HOW_MANY = re.compile(r"\bhow many ((?:[a-z][\w-]*\s+){0,3}[a-z][\w-]*)", re.I)  # up to its first stopword (`_counted`)
_NUMBER_OF = re.compile(
    r"\b(?:minimum|maximum|max|min|largest|smallest)(?: number of ([a-z]+)| (?:\w+ )?(?:length|size|number|count)\b)", re.I
)
_PERCENT_Q = re.compile(r"\bpercentage\b|\bwhat percent\b|\bhow much of\b[^?]*\bcoverage\b", re.I)
_VERSION_Q = re.compile(r"\b(?:which|what)\b[^?]{0,80}?\bversion\b|\bversion (?:number|of)\b", re.I)
# "the free version of X", "an enterprise version": an edition, not a version number
_EDITION = re.compile(
    r"\b(?:free|paid|trial|enterprise|community|premium|pro|basic|hosted|cloud|desktop|mobile|web|online|offline|open[- ]source"
    r"|commercial|personal|team|business|full|lite)\s+versions?\b",
    re.I,
)
# "how much does the bug bounty pay", "how much extra pay": a sum of money (not "how much outage", "how much paid leave",
# "how much of the fee")
_MONEY_Q = re.compile(
    r"\bhow much\b(?!\s+of\b)[^?]*?\b(?:pay|pays|cost|costs|charge|charges|fee|fees|price|salary|stipend|bonus|allowance|compensation|reimburse\w*)\b",
    re.I,
)
# "at what time (UTC) are packages published", "what time does the freeze start": a time of day (not "what time
# window", "what time off", "what time should I allow")
_CLOCK_Q = re.compile(r"\bat what time\b|\bwhat time of (?:the )?day\b|\bwhat time (?:does|do|did|is|are|will)\b", re.I)
# "how long are logs retained", "what is the retention period", "how quickly must we answer", "what response time": a
# length (of time mostly; "how long should a CL be": of size; not "what data is retained": a thing)
_LENGTH_Q = re.compile(
    r"\bhow long\b|\bretention (?:period|time)s?\b|\bhow (?:quickly|soon|fast)\b|\b(?:what|which) (?:\w+ )?(?:response|resolution|turnaround) times?\b",
    re.I,
)
_PERCENT = re.compile(r"\d\s?%|\bper ?cent\b", re.I)
_MONEY = re.compile(
    r"\bfree\b|\bno (?:cost|charge|fee)\b|[$£€¥]\s?\d|\b\d[\d,.]{0,30}\s?[kKmM]?\s?(?:USD|GBP|EUR|dollars?|pounds?|euros?)\b|\b(?:USD|GBP|EUR)\s?\d",
    re.I,
)
_CLOCK_HELD = re.compile(
    _CLOCK.pattern
    + r"|\b\d{1,2}(?:[.:]\d{2})?\s?(?:am|pm|a\.m\.|p\.m\.)(?!\w)|\b\d{1,4}(?::\d{2})?\s?(?:UTC|GMT|BST|CET|CEST|PST|PDT|EST|EDT)\b",
    re.I,
)  # a time of day as a handbook writes one: 14:00, 9am, 5 p.m., 1600 UTC, noon
_LENGTH = re.compile(
    rf"\b(?:{_COUNT}|an?|several|a few)"
    r"[\s-]+(?:business |calendar |working |full )?(?:seconds?|minutes?|hours?|days?|weeks?|months?|years?|quarters?|sprints?|cycles?|releases?)\b"
    rf"|\b(?:{_COUNT}|several|a few)"
    r"[\s-]+(?:lines?|words?|characters?|chars|pages?|files?|bytes|[KMG]B)\b"
    r"|\b\d{1,6}\s?(?:ms|milliseconds?|s|secs?|m|mins?|h|hrs?|d|wks?|mos?|yrs?)\b|\b(?:indefinitely|forever|permanently)\b"
    r"|\b(?:immediately|at once|straight away|right away|as soon as possible|asap|within the hour"
    r"|same[- ](?:business |working )?day|next (?:business |working )?day)\b",
    re.I,
)  # a length of time ("a day", "two weeks", "30d", "24h", "immediately": how soon) or of size counted ("100 lines"; "a file" is no length)
# a cloud region as a handbook names one: a region code ("us-east1", "eu-west-2", "ap-southeast-1") or a named
# region ("the London region", "EU (Ireland) region"; not "each region", "the same region")
_REGION = re.compile(
    r"\b(?i:us|eu|europe|asia|ap|sa|ca|me|af|il|uk|northamerica|southamerica|australia)-(?i:[a-z]{1,15})(?:-(?i:[a-z]{1,15})){0,3}-?\d\b"
    r"|\b(?!(?:Each|Every|The|This|That|These|Those|Any|One|A|An|Same|Other|Another|Primary|Secondary|Single|Multiple|Which|What|Some|All|Both|Most|Many|Several|Your|Our|Their|Default|Supported|New)\b)"
    r"[A-Z][a-z]+\)? [Rr]egions?\b"
)
_REGION_Q = re.compile(r"\b(?:which|what)\s+(?:[\w.-]{1,40}\s+){0,2}regions?\b", re.I)
_VERSION = re.compile(r"\b\d+\.\d+(?:\.\d+)*\b|\bv\d+\b|\bversion \d+", re.I)
_COUNTED = re.compile(r"\b" + _NUMBER_WORD + r"(?=((?:[\s-]+[a-z]+){1,3}))", re.I)


# "Which PostgreSQL major version", "what exact Terraform version number", "what version of Ruby": the thing versioned.
# A qualifier may stand between the name and "version" and is never the name itself: one list serves both.
_QUALIFIERS = (
    "major minor exact latest current minimum supported required recommended release stable default pinned lts target"
    " preferred newest oldest"
).split()
_VERSIONED = (
    re.compile(r"\bversion (?:of|for) (?:the )?([A-Za-z][\w.+#-]*[\w+#])", re.I),
    re.compile(r"\b([A-Za-z][\w.+#-]{0,40}?)\s+(?:(?:" + "|".join(_QUALIFIERS) + r")\s+)*version\b", re.I),
)
# a determiner, "new" or "old", a qualifier or a stopword ("Which is latest version?") before "version" names nothing versioned
_NOT_VERSIONED = frozenset(["new", "old", *_QUALIFIERS]) | ragline.text.STOPWORDS


def versioned(question: str) -> str | None:
    """The name a version question asks the version of ("Which PostgreSQL major version ..." ->
    "PostgreSQL", "what version of Ruby" -> "Ruby"), or None where it names none ("which version")."""
    for pattern in _VERSIONED:
        for m in pattern.finditer(question):
            if m.group(1).casefold() not in _NOT_VERSIONED:
                return m.group(1)
    return None


def _version_of(name: str) -> re.Pattern[str]:
    """A version of `name` as a handbook writes one: the name (its letters and digits, or their first
    five on: "Postgres" for PostgreSQL, "Node" for Node.js), then a number ("PostgreSQL 16", "Java 17",
    "postgres:12.4") or, within two words, a dotted or v-numbered version ("Go 1.22", "Terraform
    v1.5", "Ruby version 3.2"). A version of another thing does not count ("in 3.30 the postgres
    container"). Every run is bounded: no quadratic scan of a long line."""
    letters = re.match(r"[A-Za-z0-9]+", name)
    stem = re.escape((letters.group() if letters else name)[:5])
    name_ = rf"\b{stem}[\w.+#-]{{0,40}}"
    return re.compile(
        rf"{name_}[\s:@]{{1,3}}v?\d+\b(?!\.\d)"
        rf"|{name_}(?:[\s:@]{{1,3}}[\w-]{{1,40}}){{0,2}}?[\s:@]{{1,3}}(?:v|version\s+)?\d+(?:\.\d+)+\b"
        rf"|{name_}(?:[\s:@]{{1,3}}[\w-]{{1,40}}){{0,2}}?[\s:@]{{1,3}}v\d+\b",
        re.I,
    )


def _counted(words: str) -> str:
    """What "how many" counts: its words up to the first stopword ("cloudflare rate limiting rules are
    we allowed" -> "cloudflare rate limiting rules", "days after a P1" -> "days", "of the reviewers must"
    -> "reviewers")."""
    out: list[str] = []
    for word in words.casefold().split():
        if word in ragline.text.STOPWORDS:
            if out:
                break
            continue  # "how many of the reviewers": what follows the stopwords
        out.append(word)
    return " ".join(out) or words.casefold().split()[0]


def asked_quantity(question: str) -> tuple[str, str | None] | None:
    """What quantity a question asks for, when it names one precisely:

    ("count", UNIT)  "how many days ...", "the maximum number of files": a number of UNIT ("how many cloudflare
                     rate limiting rules": a number of any of those words, "10 rate limiting rules")
    ("number", None) "the minimum password length": some number
    ("percent", None) "what percentage of test coverage ..."
    ("version", NAME) "which Go version ...", "what version of Terraform": a version of NAME (`versioned`;
                     None: "what version number"; not "the free version of X": an edition)
    ("region", None) "which AWS region", "what region is the standby": a cloud region ("eu-west-2", "the London region")
    ("money", None)  "how much does the bug bounty pay", "how much extra pay": a sum in a currency
    ("clock", None)  "at what time (UTC) are packages published": a time of day (not "what time window")
    ("length", None) "how long are logs retained", "the retention period", "how quickly", "what response time": a length
                     of time or size ("30 days", "100 lines", "immediately")
    None otherwise (how often, when and how much else have answers in too many shapes).
    """
    if m := _HOW_MANY.search(question):
        return ("count", _counted(m.group(1)))
    if _PERCENT_Q.search(question):
        return ("percent", None)
    if _VERSION_Q.search(question) and not _EDITION.search(question):
        return ("version", versioned(question))
    if _REGION_Q.search(question):
        return ("region", None)
    if _MONEY_Q.search(question):
        return ("money", None)
    if _CLOCK_Q.search(question):
        return ("clock", None)
    if _LENGTH_Q.search(question):
        return ("length", None)
    if m := _NUMBER_OF.search(question):
        return ("count", m.group(1).casefold()) if m.group(1) else ("number", None)
    return None


def holds_quantity(asked: tuple[str, str | None], text: str, question: str = "") -> bool:
    """Whether `text` holds an answer of the shape `asked_quantity` gave: a number (as digits or
    a word) of the unit within two words of it ("14 days", "two approving reviewers", "a single
    file"; the unit's words compared by their stems, any one of them will do), a percentage, a version, a sum of money ("$500",
    "200 GBP"), a time of day ("14:00", "9am", "noon"), a length ("two weeks", "a day",
    "100 lines", "indefinitely"), a cloud region ("eu-west-2"), or any number. A number
    the question itself states does not count."""
    kind, unit = asked
    stated = " ".join(question.casefold().split())
    text = prose(text)
    if kind == "count" and unit:
        want = {ragline.text.stem(w) for w in unit.split()}
        for m in _COUNTED.finditer(text):
            after = {ragline.text.stem(w) for w in re.split(r"[\s-]+", m.group(1).casefold()) if w}
            if want & after and " ".join(m.group().casefold().split()) not in stated:
                return True
        return False
    if kind == "version" and unit:
        return any(" ".join(m.group().casefold().split()) not in stated for m in _version_of(unit).finditer(text))
    pattern = {"percent": _PERCENT, "version": _VERSION, "region": _REGION, "money": _MONEY, "clock": _CLOCK_HELD, "length": _LENGTH}.get(
        kind, NUMBER
    )
    return any(" ".join(m.group().casefold().split()) not in stated for m in pattern.finditer(text))


# The imperative that follows a purpose or a condition and its comma: the word after the comma is in lower case, no
# pronoun, article or other word a statement opens with ("To view logs, Kibana can be used", "If so, the team ..."),
# and no -ing or third-person form ("reviewing happens", "reviews happen"): the verb. "then", "first", "just" may
# come before it but are not it ("If X, then the codebase never improves" is no advice).
_IMPERATIVE = (
    r"(?:first\s+|then\s+|simply\s+|just\s+|please\s+)?"
    r"(?!(?:we|you|they|it|i|he|she|the|a|an|this|that|these|those|there|our|your|their|its|some|many|most|all|each|every|one"
    r"|in|on|at|for|with|by|as|and|or|but|so|if|when|which|who|what|is|are|was|were|be|has|have|had|do|does|not|no|nobody"
    r"|nothing|everyone|everybody|people|only|such|both|any|more|my|me|us|his|her|here|then|first|simply|just|please"
    r"|will|would|could|can|might|shall|should|must|may|several|even)\b)"
    r"(?-i:[a-z]+)(?<!ing)(?<![^s]s)\b"
)

# Advice for a situation: a condition, then what to do in it. "If it's too hard for you to read the code ..., then you
# should let the developer know", "However, after the emergency is resolved you should look over ...", "When dealing
# with time zone differences, try to get back to the author ..." (what a "what do I do" question in a situation asks
# for). The condition may follow a word joining it to the sentence before ("However, after ..."); without a comma it
# has two words at least before the advice, so "If you can ..." is no advice (a modal later in a comma-less condition,
# "When the docs say you can skip it the build fails", still reads as one: no parser here tells the clauses apart).
_SITUATION = r"^\W*(?:(?:however|but|so|also|then|and|otherwise|usually|typically|in general)\W+)?(?:if|when|once|after|before)\b"
_ADVICE = re.compile(
    _SITUATION
    + r"(?:[^.;:]*,|(?:\s+[^\s.;:,]+){2,30}?)\s*(?:then\s+)?(?:you|we|they|the \w+)\s+(?:should|must|can|need to|may)\b|"
    + _SITUATION
    + r"(?>[^.;:,]{0,150}),\s*"
    + _IMPERATIVE,
    re.I,
)

# An instruction: a purpose, then what to do ("To set an override, click ...", "To request an exception, open an MR").
# The purpose is no set phrase ("To date,", "To sum up,", "To some extent,", "To be clear,", "To this end,"); it runs to
# its first comma; the imperative follows.
_INSTRUCTION = re.compile(
    r"^\W*to (?!(?:date|sum up|summari[sz]e|recap|conclude|illustrate|be|put it|some|a \w+ (?:extent|degree)|the extent|our|my"
    r"|me|this end|that end|whom)\b)(?>\w+)[^.;:,]{0,150},\s*" + _IMPERATIVE,
    re.I,
)


# A recommendation, with or without a situation: "the appropriate path forward is to fix the issue in the canonical
# repository", "it's usually best to insist that ...", "it is a good idea to ..." (what an `asks_advice` question wants).
_RECOMMENDS = re.compile(
    r"\b(?:(?:best|right|appropriate|recommended|preferred|simplest|safest) (?:\w+ ){0,2}(?:is|are) to"
    r"|it(?:'s|’s| is) (?:usually |often |generally |also )?(?:best|better|a good idea|advisable|wise|recommended) to)\b",
    re.I,
)

# A rule laid down: a prohibition or an absolute, opening its sentence ("Don't block CLs from being submitted based only
# on personal style preferences", "Never force push to main", "Always ..."): whether one may, answered. Not a word that
# only begins so ("Always-on replicas ..."), nor a quoted phrase ('"Don't panic" is printed on the cover').
_LAYS_DOWN = re.compile(
    r"^[\s(]*(?:(?:so|thus|instead|rather|in general|usually|generally),?\s+)?(?:don't|don’t|do not|never|always|avoid)(?![-\w])",
    re.I,
)

# A bulleted item that states rather than directs: it opens with a word a statement opens with (a pronoun, an article,
# a condition, a modal: "- If you are on call, then you are expected to ...", "- We take on-call seriously", "- Some
# hardware manufacturers only ship ...") or a verb's -ing, -ed or third-person form ("- Resolves a regression"). A
# numbered item is a step whatever it opens with; so is a bullet opening with any other word ("- Create an access request")
# or in lower case, which goes on from its lead-in ("You should use ... in either:", then "- the origin for your site's ...").
_STATEMENT = (
    r"(?-i:(?=[A-Z]))(?:(?:if|when|whenever|once|while|unless|because|although|though|since|as|we|you|they|it|i|he|she|our"
    r"|your|their|its|my|the|a|an|this|that|these|those|there|some|many|most|all|each|every|any|no|not|such|both|one|other"
    r"|is|are|was|were|be|has|have|had|do|does|did|can|could|should|would|will|may|might|must|and|or|but|so)\b"
    r"|[a-z]+(?:ing|ed)\b|[a-z]*[^s\W]s\b)"
)
_STATED = re.compile(r"^\s*[-*+]\s+[*_`]*" + _STATEMENT, re.I)
# A sentence that opens as a statement does ("The risk is when ...", "Most systems become ..."), not as an order
# ("Isolate test environments ...", "Notify the contacts ...").
STATES = re.compile(r"^\W*" + _STATEMENT, re.I)
# A sentence that opens with an order: a verb, capitalised or after "First,", "Then", "Please" ... ("First, ensure the
# pipeline is green"; not a wrapped line's middle, "report it to support"), then an article, a pronoun, a particle or
# code ("Capture a charge with `POST ...`", "Look at the CL description", "Look out for ...", "Run `make test` first",
# "Make sure ..."); or a purpose and then the order (`_INSTRUCTION`: "To backport to a branch, simply attach ..."). Not
# a statement's opening (`STATES`: a pronoun, a condition, a verb's -ing, -ed or -s), a preposition or an adverb ("In
# the general case, ...", "Where a schedule is given ...", "Occasionally a correction ..."), "Note that" or "Remember
# that" (a fact follows), a noun before its verb ("Security issues are ...", "Error budgets help ...": the word after
# the first is none of those), nor a first word of a noun's ending ("Ownership at", "Freedom for"; a verb so ending,
# "Document the routes", is missed too). A verb before a bare noun or a link ("Upload evidence with ...", "Use
# [Terraform][] ...") is missed: no parser here tells it apart.
_ORDER = re.compile(
    r"^\W*(?:(?:first|then|next|finally|please|simply|just),?\s+|(?-i:(?=[A-Z])))"
    r"(?!(?:in|on|at|for|with|by|from|to|as|after|before|during|under|over|since|until|within|without|of|about|per|via"
    r"|where|whether|through|like|only|usually|otherwise|given|occasionally|currently|often|typically|sometimes|generally"
    r"|however|now|today|past|taken|suppose|sorry|note|remember|almost|here|even|ultimately|also|still|first|then|next|finally)\b)"
    r"(?-i:[A-Za-z][a-z]+)(?<!dom)(?<!ion)(?<!ment)(?<!ness)(?<!ity)(?<!ery)(?<!ship)\s+"
    r"(?:(?:a|an|the|your|this|that|these|those|it|them|each|every|all|any|out|up|down|off|at|for|into|sure)\b|`)",
    re.I,
)


# An order after the frame it holds in: a phrase of what to go by ("Based on user journeys, create test cases per
# scenario", "Using the runbook, check ...", "According to the plan, ..."), its comma, then the imperative. Not a
# condition ("If the code is hard to read, ask the author": advice for a situation, `_ADVICE`), nor a place, a time or
# an example ("In production, latency matters ...", "In the past, deployment took hours", "For example, code review
# catches ...": a noun there reads as the verb, and no parser here tells them apart), nor a statement after the comma
# ("Given these questions, we documented ..."), nor a noun there before its verb: a noun's ending, as `_ORDER` reads it
# ("Based on the survey, management prefers ..."), a verb's -s or -ed form next ("Using the new pipeline, code
# ships hourly"), or a verb such as "is" within three words ("Based on that, code that is hard to read ..."; an order so
# followed, "check that it is set", is missed).
_FRAMED = re.compile(
    r"^\W*(?:based on|according to|using|depending on|following)\s(?>[^.;:,]{1,100}),\s*"
    + _IMPERATIVE
    + r"(?<!dom)(?<!ion)(?<!ment)(?<!ness)(?<!ity)(?<!ery)(?<!ship)(?<!cy)(?<!ance)(?<!ence)"
    + r"(?!\s+[a-z]+(?:[^s\W]s|ed)\b)"
    + r"(?!(?:\s+[^\s.;:,]+){0,2}?\s+(?:is|are|was|were|has|have|had|can|could|should|must|will|would|may|might|do|does|did)\b)",
    re.I,
)


def orders(text: str) -> bool:
    """Whether a sentence opens with an order (`_ORDER`, `_INSTRUCTION`, `_FRAMED`): what to do, not what is."""
    return bool((_ORDER.match(text) and not STATES.match(text)) or _INSTRUCTION.match(text) or _FRAMED.match(text))


def cue_match(cue: str | None, cand: Any, question: str = "") -> float:
    """How well a candidate (a quotable piece: `.text`, `.kind` of sentence, item, row or code)
    has what the cue asks for: 1.0 fully, a fraction in part, 0.0 not. A time, duration or
    number the question itself states ("if our SLO is 99.9%, how much ...") is not an
    answer to it: only the others count. "How often" is answered by a frequency ("quarterly",
    "every 12 months"), "when" by a time of day."""
    text = prose(cand.text)

    def new(pattern: re.Pattern[str]) -> bool:
        return any(" ".join(m.group().casefold().split()) not in stated for m in pattern.finditer(text))

    stated = " ".join(question.casefold().split())
    if cue == "time":
        if HOW_OFTEN.search(question):  # a frequency answers "how often", a time of day less
            return 1.0 if new(_PERIOD) else 0.6 if new(_CLOCK) else 0.3 if new(_DURATION) else 0.0
        return 1.0 if new(_CLOCK) else 0.6 if new(_PERIOD) else 0.3 if new(_DURATION) else 0.0
    if cue == "duration":
        return 1.0 if new(_DURATION) else 0.0
    if cue == "number":
        return 1.0 if new(NUMBER) else 0.0
    # steps: a list, code or an instruction; half for advice in prose to one in a situation ("If ..., then you should ...")
    # and for a lead-in (a sentence ending in a colon)
    if cue == "steps":
        if cand.kind == "item" and _STATED.match(text):  # a bullet stating a rule or a fact is a step only weakly
            return 0.25
        return (
            1.0
            if cand.kind in ("item", "code") or (cand.kind == "sentence" and _INSTRUCTION.search(text))
            else 0.5
            if cand.kind == "sentence" and (_ADVICE.search(text) or ragline.text.leads_in(text))
            else 0.0
        )
    # advice for a situation, a recommendation or a rule laid down, in prose (a question is none); to an ask for leave,
    # also what grants or states the ability (`asks_leave`, `_PERMITS`)
    if cue == "advice":
        if cand.kind != "sentence" or text.rstrip().endswith("?"):
            return 0.0
        if any(p.search(text) for p in (_ADVICE, _RECOMMENDS, _LAYS_DOWN)):
            return 1.0
        return 1.0 if asks_leave(question) and _PERMITS.search(text) else 0.0
    if cue == "code":
        return 1.0 if cand.kind == "code" else 0.0
    if cue == "name":
        return 1.0 if _NAME.search(text) else 0.0
    if cue == "definition":
        return 1.0 if cand.kind == "row" else 0.7 if _DEFINING.search(text) and len(text.split()) >= 6 else 0.0
    return 0.0


# --------------------------------------------------------------------------- how a quote reads


ANNOUNCES = re.compile(r"\b(?:the following|as follows|a number of|several|these|include|includes)\b", re.I)  # a list comes
# a line that is markup, never prose: a link reference definition (`[ref]: url`, not a footnote's `[^1]: text`), an
# abbreviation's (Python-Markdown's `*[CI]: Continuous Integration`; not an italic sentence, `*[Optional]: skip it.*`) and a
# snippet include (pymdownx's `--8<-- "part.md"`; `SNIPPETS`: the lines between two bare `--8<--`)
LINK_DEFINITION = re.compile(r"^ {0,3}(?:\[(?!\^)[^\]\n]+\]:\s*\S|\*\[[^\]\n]+\]:[^\n]*[^*\s][ \t]*$|-{1,2}8<-{1,2}(?:[ \t]|$))")
SNIPPETS = re.compile(r"^[ \t]*-{1,2}8<-{1,2}[ \t]*$")  # a bare `--8<--`: the lines up to the next are files to include
FOOTNOTE = re.compile(r"^ {0,3}\[\^[^\]\s]{1,100}\]:[ \t]*")  # a footnote's definition opens: `[^1]: ` (its text is prose)
# where a footnote is called, the blanks before it with it: `push[^1].`, `text [^1].` (not a class of a pattern, `[^a-z]`)
_FOOTNOTE_REF = re.compile(r"(?<![ \t])[ \t]*+\[\^(?![A-Za-z0-9]-[A-Za-z0-9]\])[\w-]{1,100}\]")
# a link, its text brackets and all (`[Migration errors in 16.[012]](url)`: one level of brackets inside), bounded: linear on
# "[a](" x 10k
_LINK = re.compile(r"!?\[((?:[^\[\]\n]|\[[^\[\]\n]{0,200}\]){1,1000})\](?:\([^)\s]{0,2048}(?:\s+\"[^\"]{0,500}\")?\)|\[[^\]\n]{0,1000}\])")
# Strong and emphasis: the body holds no run of its own marks (strong), or none of its own mark but inside a word
# (emphasis: `*a*b*`, `_snake_case_`), so a mark that opens nothing scans only to the next one: linear on a line of
# "**a " or "*a " (a body running to the line's end took 3 s on 8,000). Each character of a body is read one way
# only (the other mark inside a word read two ways took 2^n: "*set A_B_C, ..." with 21 underscores, 9 s). A lone
# mark of its own inside is left as it is: `*pass **kwargs on*` keeps its stars.
_STRONG = re.compile(r"(\*\*|__)(?=\S)((?:(?!\1)[^\n])+?)(?<=\S)\1")
_EMPHASIS = re.compile(r"(?<![\w*\\])([*_])(?=[^\s*_])((?:[^*_\n]|(?<=\w)\1(?=\w)|(?!\1)[*_])+?)(?<=[^\s*_])\1(?![\w*])")


# [Amazon CloudWatch]: a link by its label (two characters at least, a letter among them; no bracket inside, so a "["
# that opens nothing scans only to the next: linear on a line of "[" or "[a", which took 3 s on 8,000)
_SHORTCUT_LINK = re.compile(r"(?<![\w\\!\]])\[(?=[^\[\]\n]*[^\W\d_])([^\[\]\n]{2,})\](?![(\[:])")


# CommonMark's backslash escape of an ASCII punctuation mark, where it does not sit inside a word (`some\_flag`,
# `NW\-5001` stay as the block has them, so the citation check finds the quote's identifiers in its block)
_ESCAPE = re.compile(r"(?<!\w)\\([!-/:-@\[-`{-~])|\\([!-/:-@\[-`{-~])(?!\w)")
# an inline code span: a run of backticks (not escaped) to the next run of as many, on one line; linear on a line of
# backticks (a lazy body between two free runs backtracked: 40,000 took 765 s)
CODE_SPAN = re.compile(r"(?<![`\\])(`+)(?!`)([^\n]+?)(?<!`)\1(?!`)")


def _unescaped(m: re.Match[str]) -> str:
    return m.group(1) or m.group(2)


_BARE_URL = re.compile(r"<?\bhttps?://[^\s>)\]]+>?")


def prose(text: str) -> str:
    """`text` with each link's target left out (its text kept) and bare URLs dropped: the "2019" of
    ".../2019/07/16/the-pgp-problem.html" is no number the handbook states."""
    return _BARE_URL.sub("", _LINK.sub(r"\1", text))


def plain(text: str) -> str:
    """Prose markup a reader should not see in a quote: `[text](url)`, `[text][ref]` and the
    shortcut `[text]` become text, `**strong**`, `*emphasis*` and `_emphasis_` lose their
    marks, a footnote's call (`[^1]`) is gone, and a backslash escape (`\\"`, `\\*`) is the mark it
    escapes. Inline code stays as it is (`__init__`, `[tool.ruff]`, `a\\*`: each code span is set
    aside while the rest is read, `CODE_SPAN`), and so do underscores inside words (`snake_case`),
    a citation-like `[7]` and a task box `[ ]`. Code blocks are not passed here."""
    spans: list[str] = []
    if "`" in text:
        free = (c for c in map(chr, range(0xE000, 0xF900)) if c not in text)
        mark, end = next(free), next(free)  # two private-use characters the text lacks: where a span was set aside
        text = CODE_SPAN.sub(lambda m: f"{mark}{_set_aside(spans, m.group())}{end}", text)
    text = _FOOTNOTE_REF.sub("", text)
    text, links = _LINK.subn(r"\1", text)
    if links:
        text = _LINK.sub(r"\1", text)  # again: an image in a link (a badge) is its alt text
    text = _SHORTCUT_LINK.sub(r"\1", text)
    text = _STRONG.sub(r"\2", text)
    text = _EMPHASIS.sub(r"\2", text)
    text = _ESCAPE.sub(_unescaped, text)
    if not spans:
        return text
    return re.sub(f"{mark}([a-j]+){end}", lambda m: spans[int(m.group(1).translate(_FROM_LETTERS))], text)


_TO_LETTERS, _FROM_LETTERS = str.maketrans("0123456789", "abcdefghij"), str.maketrans("abcdefghij", "0123456789")


def _set_aside(spans: list[str], span: str) -> str:
    """A code span's number among those set aside (`plain`), in letters: a link's label needs one (`[`rag-chunk`]`), and
    no letter is a mark `plain` reads."""
    spans.append(span)
    return str(len(spans) - 1).translate(_TO_LETTERS)
