"""Runnable examples shipped with the package (console commands ``neuron-train-gpt`` and
``neuron-embed``; thin scripts in the repository's ``examples/`` call the same ``main``).

- :mod:`.gpt` a small decoder-only transformer (``TinyGPT``)
- :mod:`.corpus` the character-level corpus (the Jargon File, from Debian's ``jargon-text``)
- :mod:`.train_gpt` trains ``TinyGPT`` on ``neuron`` (or CPU), writes ``runs/<name>/``
- :mod:`.embed` all-MiniLM-L6-v2 sentence embeddings on ``neuron`` against CPU
"""

import argparse


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` shows each option's default, except where there is none (None / off)."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False or action.default is argparse.SUPPRESS \
                or "default:" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)
