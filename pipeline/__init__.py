"""llm-trace-pipeline: why did users wait for the first token, and why is generation slow?

Data flow: ingest -> warehouse -> fit -> attribute / replay -> report.
"""

__version__ = "0.1.0"
