"""llmbench: did this change make LLM inference slower, and is that real or noise?"""

from llmbench.engine.allocator import steady_pages

__version__ = "0.1.0"

# Before torch allocates anything, which fixes its huge-page choice for the process's life
# (`llmbench.engine.allocator`): importing llmbench must come first, and it does in the
# suite's conftest, the CLI and `llmbench ab`'s sides.
steady_pages()
