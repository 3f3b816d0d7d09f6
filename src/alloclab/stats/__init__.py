"""Statistics: from stored runs to verdicts.

In: an Experiment. Out: per-cell summaries and findings, paired comparisons with their
intervals and one of four verdicts, sweep curves and ablations, and the recommendation.
"""
