"""Workloads: what to run, described as data.

In: built-in program names, a command line, an experiment file or a recipe. Out: Workloads
(argv, metrics to read, parameters) and, for services, the parsed server, clients and phases.
"""
