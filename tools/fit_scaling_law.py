"""Fits the scaling law success = σ(α·ln N + β·√T − γ·L + b) to training runs.

  python tools/fit_scaling_law.py RUN_DIR [RUN_DIR ...] --out_dir=DIR

Every logged step of every run is one point: N from the run's parameter count (config.json
"num_params", else "model"/"num_params", else the metrics records' "num_params"), T from the
step, L from response_length, success from accuracy (--success_key). Writes DIR/fit.json (the
constants with bootstrap intervals over runs, goodness of fit, and the published constants
evaluated on the same data) and DIR/fit.png. Runs still being written are fine: a partial last
line is skipped.
"""

from absl import app, flags, logging

from agentic_jax.scaling import fit_runs, format_summary

_OUT_DIR = flags.DEFINE_string("out_dir", ".", "Where fit.json and fit.png are written.")
_SUCCESS_KEY = flags.DEFINE_string(
    "success_key", "accuracy", "The metrics key read as the success rate."
)
_FIX_BIAS = flags.DEFINE_bool("fix_bias_at_zero", False, "Fit the published form (no bias).")
_L2 = flags.DEFINE_float("l2", 0.0, "Ridge strength; > 0 regularises separable data.")
_NUM_BOOTSTRAP = flags.DEFINE_integer(
    "num_bootstrap", 200, "Bootstrap resamples of whole runs (0: no intervals)."
)
_CONFIDENCE = flags.DEFINE_float("confidence", 0.95, "Coverage of the bootstrap intervals.")
_SEED = flags.DEFINE_integer("seed", 0, "Bootstrap seed.")


def main(argv: list[str]) -> None:
    run_dirs = argv[1:]
    if not run_dirs:
        raise app.UsageError("give at least one RUN_DIR")
    result = fit_runs(
        run_dirs,
        _OUT_DIR.value,
        success_key=_SUCCESS_KEY.value,
        fix_bias_at_zero=_FIX_BIAS.value,
        l2=_L2.value,
        num_bootstrap=_NUM_BOOTSTRAP.value,
        confidence=_CONFIDENCE.value,
        seed=_SEED.value,
    )
    logging.info("wrote %s/fit.json and fit.png\n%s", _OUT_DIR.value, format_summary(result))


if __name__ == "__main__":
    app.run(main)
