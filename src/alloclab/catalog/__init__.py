"""Catalog: which allocators exist, their tunables, and the variants a user names.

In: allocators.toml and the libraries on this machine. Out: Allocator entries and Variants
(an allocator plus validated settings), used by every later stage.
"""
