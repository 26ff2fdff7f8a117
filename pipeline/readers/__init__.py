"""Readers turn one input file, in the format some tool writes, into canonical frames.

Every reader module defines ``READER``, a :class:`pipeline.readers.base.Reader`. The registry
(:mod:`pipeline.readers.registry`) finds them; ``pipeline ingest`` sniffs each file with them.
"""
