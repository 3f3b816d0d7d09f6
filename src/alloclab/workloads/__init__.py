"""Workloads: the built-in C programs (builtin.py); commands and services live beside."""
