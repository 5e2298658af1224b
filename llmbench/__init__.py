"""llmbench: did this change make LLM inference slower, and is that real or noise?"""

__version__ = "0.1.0"
