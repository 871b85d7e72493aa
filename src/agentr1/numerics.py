"""Pinned CPU numerics: the same commit gives the same bits on every x86-64 machine with AVX2.

Floating-point results depend on which kernels run, and by default the libraries pick them from
the host CPU: torch's own vectorized kernels (``ATEN_CPU_CAPABILITY``: AVX-512 on a CPU that has
it, AVX2 otherwise), MKL's BLAS code path (AVX-512 on Intel CPUs) and oneDNN's ISA. The sums
come out in a different order, so a training run on an AVX-512 machine ends with other weights
than on an AVX2 machine, and a ``dvc.lock`` made on one does not reproduce on the other.

:func:`pin_cpu_numerics` fixes all three to their AVX2 code paths before torch is imported
(every ``agentr1`` stage calls it first, in :func:`agentr1.cli.main`):

======================  ==============  ==============================================
variable                pinned value    what it fixes
======================  ==============  ==============================================
``ATEN_CPU_CAPABILITY``  ``avx2``        torch's vectorized CPU kernels (elementwise ops,
                                         softmax, norms, reductions, Sleef exp/log)
``MKL_CBWR``             ``AVX2,STRICT`` MKL's conditional numerical reproducibility: the
                                         AVX2 code path on any CPU that has it, strict
                                         (independent of memory alignment)
``ONEDNN_MAX_CPU_ISA``   ``AVX2``        oneDNN (mkldnn) kernels
======================  ==============  ==============================================

Thread counts are the other half: the stages set torch's threads from params (``num_threads``)
so reductions split the same way on any core count. The values are forced, not defaulted: a
shell that exports ``ATEN_CPU_CAPABILITY=avx512`` still gets the pinned kernels. Set
``AGENTR1_CPU_NUMERICS=native`` to leave the environment alone (faster on AVX-512 machines, and
then results depend on the CPU). Scope: x86-64 CPUs with AVX2 and FMA, the locked wheels
(torch 2.13.0+cpu) - not other torch builds, GPUs or ARM.
"""

from __future__ import annotations

import os
import sys
import warnings

PINNED: dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "AVX2,STRICT",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
}
SWITCH = "AGENTR1_CPU_NUMERICS"
MODES = ("avx2", "native")


def pin_cpu_numerics(environ: dict[str, str] | None = None) -> dict[str, str]:
    """Set :data:`PINNED` in ``environ`` (default ``os.environ``) unless ``AGENTR1_CPU_NUMERICS``
    is ``native``; returns what was set. It must run before torch is imported in this process (the
    libraries read these variables once, when they load): when torch is already loaded with other
    settings it warns that the numerics of this process are not pinned. ``ValueError`` for an
    unknown mode."""
    env = os.environ if environ is None else environ
    mode = env.get(SWITCH, "avx2").strip().lower() or "avx2"
    if mode not in MODES:
        raise ValueError(f"{SWITCH}={env[SWITCH]!r}: allowed values are {', '.join(MODES)}")
    if mode == "native":
        return {}
    if environ is None and "torch" in sys.modules and any(os.environ.get(k) != v for k, v in PINNED.items()):
        warnings.warn("agentr1: torch was imported before pin_cpu_numerics(), so this process runs the host's "
                      "native CPU kernels; results may differ from a pinned run", RuntimeWarning, stacklevel=2)
    env.update(PINNED)
    return dict(PINNED)
