"""How many examples a property test runs: its own count in the whole suite, fewer in the fast loop.

tests/conftest.py registers two hypothesis profiles: "ragline", the whole suite's (`just test`), and
"fast", `just test-fast`'s (`pytest --hypothesis-profile=fast`), whose `max_examples` (FAST) is the
most any property test runs there. A test that asks for a count of its own asks through `examples`,
since a count written into `@settings` overrides every profile's:

    @settings(max_examples=examples(300), deadline=None)

runs 300 examples under "ragline" and FAST under "fast". Every failing example hypothesis has found
is kept in its database (.hypothesis/) and tried first on the next run, in either profile.
"""

from __future__ import annotations

from hypothesis import settings

FAST = 20  # the fast loop's examples per property test (tests/conftest.py's "fast" profile)


def examples(wanted: int) -> int:
    """`wanted` examples, or fewer under the fast profile: its max_examples when that is smaller.
    Read where the test is defined, at its module's import, which pytest runs after loading the profile."""
    if settings.get_current_profile_name() == "fast":
        return min(wanted, settings.default.max_examples)
    return wanted
