"""tune: from the program's own mechanism to the allocator and the settings to race.

In: the fingerprints of a diagnosis experiment (measure), then the race's Analysis (stats).
Out: Readings (diagnosis), Candidates (prescribe, by catalog/tune_rules.toml), and the TuneAnswer
(answer) that report/tune.py renders. The runs themselves go through the same plan, measure and
store stages as any experiment; cli/tune.py drives them.
"""
