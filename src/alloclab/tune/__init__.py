"""tune: from the program's own mechanism to the allocator and the settings to race.

In: the fingerprints of a diagnosis experiment (measure).
Out: Readings (diagnosis), Candidates (prescribe, by catalog/tune_rules.toml; stored with the race),
the screen's finalists and the race's judge. The runs go through the same plan, measure and store
stages as any experiment, and the race's answer is part of its Results (stats/tune_answer.py), which
every report renders; cli/tune.py drives them.
"""
