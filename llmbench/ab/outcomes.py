"""What one bisect step can decide about a commit against its baseline."""

SLOWER = "slower"  # slower on some benchmark (or, with --work, more counted work)
NOT_SLOWER = "not slower"  # ruled out on every benchmark it watched
UNDECIDED = "undecided"  # its A/B did not decide within its share of the budget
SKIPPED = "skipped"  # the commit could not be measured
