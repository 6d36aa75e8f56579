"""The ``fairagg`` command line: ``run``, ``compare``, ``rules``, ``vectors`` and ``check``.

``fairagg run`` with no argument reproduces the FairAvg paper's Synthetic set-up (Table 1: 30
clients, power-law sizes, a two-dense-layer network, SGD with lr 0.01, F = 20 local epochs,
batch 10, 200 rounds, K' = 10 reporting clients) on Synthetic(1, 1). Bad arguments print one line
and exit with status 2; a run that fails midway keeps the rounds it recorded.

The package's private modules follow the command line's seams: ``_parser`` (one builder per
command), ``_config`` (flags and config files to validated settings), ``_train`` (one run
streamed into its folder, shared by run and compare), ``_run`` and ``_compare`` (the two
experiment commands), ``_describe`` (``fairagg rules``; the docs' rule pages use it), ``_tools``
(report, vectors, check) and ``_main`` (the entry point and its errors).
"""

from ._compare import COMPARE_FILES as COMPARE_FILES
from ._config import EXPERIMENT_RULE_ARGS as EXPERIMENT_RULE_ARGS
from ._main import main
from ._run import RUN_FILES as RUN_FILES
from ._run import SUMMARY_UNITS as SUMMARY_UNITS
from ._train import CHECKPOINT_FILE as CHECKPOINT_FILE
from ._train import LEGACY_CHECKPOINT_FILE as LEGACY_CHECKPOINT_FILE

# The entry point is documented and checked as fairagg.cli's (the console script names it so)
main.__module__ = __name__

__all__ = ["main"]
