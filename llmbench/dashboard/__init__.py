"""The dashboard: a static web site of saved runs (`llmbench dashboard`), opened in a browser.

`collect` reads every environment's runs (tolerating bad files, which it names), their
history verdicts and counted work, and the paired A/Bs kept with `llmbench ab --keep`;
`figures` draws them; `pages` renders the HTML; `site` writes the whole site, atomically.

May import: `llmbench.runs`, `llmbench.gate`, `llmbench.history`, `llmbench.report`,
`llmbench.errors`; never the engine, the server or torch.
"""

from llmbench.dashboard.site import build_site

__all__ = ["build_site"]
