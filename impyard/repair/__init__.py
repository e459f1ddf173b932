"""Owner repair of what Impyard preserved off main: list, show, diff, retry, rework, drop
and export candidate refs (changes the lane refused) and quarantine refs (what a box
left after an abnormal exit, with its kept checkout).

Retries go through the imp's one lane with every check; each repair is recorded in the
run's manifest and the journal with the acting owner. Retry, drop and rework each have
a dry run computed by the same function, writing nothing.
"""
