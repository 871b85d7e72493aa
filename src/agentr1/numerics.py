"""Pinned CPU numerics: the same commit gives the same bits on every x86-64 machine of one CPU vendor.

Floating-point results depend on which kernels run, and by default the libraries pick them from
the host CPU: torch's own vectorized kernels (``ATEN_CPU_CAPABILITY``: AVX-512 on a CPU that has
it, AVX2 otherwise), MKL's BLAS code path and oneDNN's ISA. The sums come out in a different
order, so a training run on one machine ends with other weights than on another, and a
``dvc.lock`` made on one does not reproduce there.

:func:`pin_cpu_numerics` fixes all three before torch is imported (every ``agentr1`` stage calls it
first, in :func:`agentr1.cli.main`). ``AGENTR1_CPU_NUMERICS`` picks the pin (:data:`PINS`):

=============  =======================  =====================  ==================================
mode           ``ATEN_CPU_CAPABILITY``  ``MKL_CBWR``           the same bits on
=============  =======================  =====================  ==================================
``avx2``       ``avx2``                 ``AVX2,STRICT``        every CPU of one vendor with AVX2
(default)                                                      and FMA (Intel: Intel's AVX2 branch;
                                                               AMD: MKL's AUTO branch)
``portable``   ``avx2``                 ``COMPATIBLE``         every CPU of one vendor (MKL's branch
                                                               for any CPU; the AdamW step still
                                                               differs across vendors); 2.2-2.3x
                                                               slower training
``native``     (left alone)             (left alone)           the same CPU model only
=============  =======================  =====================  ==================================

(``ONEDNN_MAX_CPU_ISA=AVX2`` in both pins.) Why the default holds per vendor only, measured with
``scripts/numerics_fingerprint.py`` on an Intel Xeon against the AMD EPYCs (``bench/RESULTS.md``
section 24): under the pin every matrix product (MKL's GEMMs) and torch's own AVX2 kernels agree
across the vendors; MKL's vector math (``exp``, ``log``: VML, whose conditional-reproducibility
``AVX2`` branch runs on Intel CPUs only - on other CPUs the AUTO branch runs, as MKL's developer
guide says) and the AdamW step do not, so an AMD EPYC and an Intel Xeon train other weights (issue
47: every stage after ``pretrain`` re-ran with other bits on an AMD clone of Intel-made outputs).
Three AMD generations (Zen 3 without AVX-512, Zen 4 and Zen 5 with it) give identical bits under
this pin. ``COMPATIBLE`` (MKL's branch for Intel and non-Intel CPUs alike) aligns ``exp`` and
``log`` but not the AdamW step, so no pin gives both vendors one set of training bits, and it costs
2.31x per pretraining step, 2.17x per update and 1.62x per rollout on the project's AMD EPYC
(``bench/numerics_pin.py``, ``bench/RESULTS.md`` section 17): an opt-in, not the default.
The report's verdicts do not lean on the bits: their intervals resample training seeds, which is
what another vendor's run amounts to (docs/GUARANTEES.md).

Thread counts are the other half: the stages set torch's threads from params (``num_threads``)
so reductions split the same way on any core count. The values are forced, not defaulted: a
shell that exports ``ATEN_CPU_CAPABILITY=avx512`` still gets the pinned kernels. Scope: x86-64
CPUs with AVX2 and FMA, the locked wheels (torch 2.13.0+cpu) - not other torch builds, GPUs or ARM.
``scripts/numerics_fingerprint.py`` hashes the kernels a training step uses under a pin, to
compare two machines (``tests/test_numerics.py`` checks this one against the committed file of
its vendor).
"""

from __future__ import annotations

import os
import sys
import warnings

PINS: dict[str, dict[str, str]] = {
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2,STRICT", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "portable": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "AVX2"},
}
DEFAULT = "avx2"
PINNED: dict[str, str] = PINS[DEFAULT]  # what every stage runs with unless AGENTR1_CPU_NUMERICS says otherwise
SWITCH = "AGENTR1_CPU_NUMERICS"
MODES = (*PINS, "native")


def pin_cpu_numerics(environ: dict[str, str] | None = None) -> dict[str, str]:
    """Set the pin ``AGENTR1_CPU_NUMERICS`` names (default ``avx2``, :data:`PINS`) in ``environ``
    (default ``os.environ``), nothing for ``native``; returns what was set. It must run before
    torch is imported in this process (the libraries read these variables once, when they load):
    when torch is already loaded with other settings it warns that the numerics of this process
    are not pinned. ``ValueError`` for an unknown mode."""
    env = os.environ if environ is None else environ
    mode = env.get(SWITCH, DEFAULT).strip().lower() or DEFAULT
    if mode not in MODES:
        raise ValueError(f"{SWITCH}={env[SWITCH]!r}: allowed values are {', '.join(MODES)}")
    if mode == "native":
        return {}
    pin = PINS[mode]
    if environ is None and "torch" in sys.modules and any(os.environ.get(k) != v for k, v in pin.items()):
        warnings.warn("agentr1: torch was imported before pin_cpu_numerics(), so this process runs the host's "
                      "native CPU kernels; results may differ from a pinned run", RuntimeWarning, stacklevel=2)
    env.update(pin)
    return dict(pin)
