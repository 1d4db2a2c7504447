"""Theory report: Leviathan tables, optimal lookahead, SDSL rebuild, batch policy, simulation.

``python -m paper_repro.theory`` writes paper_repro/results/theory.md and its PNG figures.
``python -m paper_repro.theory --alpha 0.8 --c 0.05 [--batch 64] [--gpu h100]`` prints the
optimal lookahead k* (at that batch size when ``--batch`` is given). No Hydra on purpose: this is
a planning calculator, not an experiment.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from specjax import theory  # noqa: E402

RESULTS = Path(__file__).parent / "results"
GPUS = {"h100": theory.H100_SXM, "h200": theory.H200}
BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
POLICY_SETTINGS = [(0.6, 0.05), (0.8, 0.05), (0.9, 0.02)]
GAMMA_ROWS = [(0.6, 0.05), (0.7, 0.05), (0.8, 0.01), (0.8, 0.05), (0.8, 0.1), (0.9, 0.02),
              (0.9, 0.05), (0.95, 0.01), (0.5, 0.2), (0.3, 0.1), (0.3, 0.5), (0.5, 0.8),
              (0.9, 1.0), (0.99, 2.0)]
SIM_ITERATIONS, SIM_SEED = 200_000, 2026


def ridge(gpu: theory.Accelerator) -> float:
    return theory.ridge_tokens(gpu.peak_flops, gpu.bandwidth, 2.0)


def seed_table() -> list[str]:
    lines = ["| α | k = 2 | k = 4 | k = 8 |", "|---|---|---|---|"]
    for a in (0.6, 0.8, 0.9):
        cells = [f"{theory.expected_tokens(a, k):.2f} ({theory.expected_tokens(a, k):.6f})"
                 for k in (2, 4, 8)]
        lines.append(f"| {a} | " + " | ".join(cells) + " |")
    return lines


def gamma_table() -> list[str]:
    lines = ["| α | c | γ* | f(γ*) | k* | f(k*) |", "|---|---|---|---|---|---|"]
    for a, c in GAMMA_ROWS:
        k, g = theory.optimal_k(a, c)
        f_g = theory.continuous_optimum(a, c)[1]
        lines.append(f"| {a} | {c} | {g:.6f} | {f_g:.6f} | {k} | "
                     f"{theory.speedup(a, k, c):.6f} |")
    return lines


def policy_tables() -> list[str]:
    lines = []
    for gpu in GPUS.values():
        n_star = ridge(gpu)
        lines += ["", f"**{gpu.name}** (ridge n* = {n_star:.2f} tokens, k ∈ [0, 32]); cells are "
                  "k*, speedup S(B, k*):", "",
                  "| α, c | " + " | ".join(f"B={b}" for b in BATCHES) + " |",
                  "|---|" + "---|" * len(BATCHES)]
        for a, c in POLICY_SETTINGS:
            pol = theory.k_policy(a, c, BATCHES, ridge=n_star)
            cells = [f"{k}, {theory.batch_speedup(b, a, k, c, ridge=n_star):.3f}"
                     for b, k in pol.items()]
            lines.append(f"| {a}, {c} | " + " | ".join(cells) + " |")
    return lines


def sdsl_section() -> list[str]:
    mu, m0 = theory.fit_draft_size_law(theory.REBUILD_TARGETS, theory.REBUILD_DATA)
    mu_i, m0_i = theory.fit_draft_size_law(theory.REBUILD_TARGETS, theory.REBUILD_DATA,
                                           integer_k=True)
    mu_2nd, m0_2nd = theory.N_STAR_LAW
    lines = [
        "Grid: M ∈ {13, 14, 30, 32, 36, 66, 70, 72, 110}B, D, D′ ∈ {3e11, 1e12, 2e12, 1.5e13}; "
        "Chinchilla PPL, SDSL [2ND] acceptance plane, tokens per FLOP at the optimal lookahead.",
        "", "| variant | μ | M₀ |", "|---|---|---|",
        f"| rebuild, continuous γ* | {mu:.3e} | {m0:.3e} |",
        f"| rebuild, integer k* | {mu_i:.3e} | {m0_i:.3e} |",
        f"| SDSL reported [2ND] | {mu_2nd:.3e} | {m0_2nd:.3e} |",
        "", f"Rebuild vs [2ND]: μ {mu / mu_2nd - 1:+.1%}, M₀ {m0 / m0_2nd - 1:+.1%}.", "",
        "| target (D = D′) | N* | M/N* | α* | γ* | speedup f |", "|---|---|---|---|---|---|",
    ]
    for label, M, D in [("OPT-13B (180B)", 13e9, 180e9), ("OPT-30B (180B)", 30e9, 180e9),
                        ("OPT-66B (180B)", 66e9, 180e9), ("LLaMA3-70B (15T)", 70e9, 15e12),
                        ("Qwen1.5-110B (3T)", 110e9, 3e12)]:
        N = theory.optimal_draft_size(M, D=D, D_prime=D)
        a = theory.predicted_acceptance(N, M, D=D, D_prime=D)
        g, f = theory.continuous_optimum(a, N / M)
        lines.append(f"| {label} | {N / 1e6:.1f}M | {M / N:.0f} | {a:.3f} | {g:.2f} | {f:.3f} |")
    return lines


def simulation_section() -> list[str]:
    from algorithms.verifiers import get_verifier  # the top layer may pick a concrete verifier
    from specjax.theory.simulation import simulate_emitted

    verifier = get_verifier("token")
    lines = [f"Token verifier on the constant-acceptance pair, {SIM_ITERATIONS:,} iterations per "
             f"cell, seed {SIM_SEED} (the test's setting).", "",
             "| α | k | simulated E[n] | formula | relative error | standard error |",
             "|---|---|---|---|---|---|"]
    for k in (2, 4, 8):
        for a in (0.6, 0.8, 0.9):
            n = simulate_emitted(verifier, a, k, n=SIM_ITERATIONS, seed=SIM_SEED)
            exact = theory.expected_tokens(a, k)
            se = n.std(ddof=1) / np.sqrt(n.size) / exact
            lines.append(f"| {a} | {k} | {n.mean():.5f} | {exact:.5f} | "
                         f"{n.mean() / exact - 1:+.4%} | {se:.4%} |")
    return lines


def plot_optimal_k(path: Path) -> None:
    alphas = np.linspace(0.01, 0.99, 393)
    fig, ax = plt.subplots(figsize=(6, 4))
    for c in (0.01, 0.02, 0.05, 0.1, 0.2):
        k, g = theory.optimal_k(alphas, c, k_max=128)
        (line,) = ax.plot(alphas, g, label=f"c = {c}")
        ax.step(alphas, k, where="mid", color=line.get_color(), alpha=0.5, lw=0.8)
    ax.set(yscale="log", ylim=(0.5, 100), xlabel="acceptance rate α",
           ylabel="optimal lookahead (line γ*, steps k*)",
           title="Optimal lookahead (Lambert W₋₁ closed form)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_goodput(path: Path, alpha: float = 0.8, c: float = 0.05) -> None:
    """Left: goodput (tokens per memory-bound target step t₀) on H100. Right: ratio over AR."""
    batches = np.unique(np.round(np.logspace(0, 11, 89, base=2)).astype(int))
    colors = {0: "grey", 1: "C0", 2: "C1", 4: "C2", 8: "C3"}
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    n_h100 = ridge(theory.H100_SXM)
    for k, color in colors.items():
        label = "AR (k = 0)" if k == 0 else f"k = {k}"
        left.plot(batches, theory.goodput(batches, alpha, k, c, ridge=n_h100), color=color,
                  lw=0.9, label=label)
    for name, gpu in GPUS.items():
        n_star = ridge(gpu)
        ls = "-" if name == "h100" else "--"
        for k in (1, 2, 4, 8):
            right.plot(batches, theory.batch_speedup(batches, alpha, k, c, ridge=n_star), ls,
                       color=colors[k], lw=0.9, label=f"{gpu.name}, k = {k}")
        best = theory.k_policy(alpha, c, batches.tolist(), ridge=n_star)
        s = [theory.batch_speedup(b, alpha, k, c, ridge=n_star) for b, k in best.items()]
        right.plot(batches, s, ls, color="k", lw=2, label=f"{gpu.name}, k*(B)")
        if name == "h100":
            g = [theory.goodput(b, alpha, k, c, ridge=n_star) for b, k in best.items()]
            left.plot(batches, g, color="k", lw=2, label="k*(B)")
    left.set(xscale="log", yscale="log", xlabel="batch size B", ylabel="tokens per t₀",
             title=f"Goodput on H100 SXM (α = {alpha}, c = {c})")
    left.legend(fontsize=7)
    right.axhline(1.0, color="grey", lw=0.5)
    right.set(xscale="log", xlabel="batch size B", ylabel="speedup over AR (goodput ratio)",
              title="Speedup vs batch (solid H100 SXM, dashed H200)")
    right.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(out_dir: Path = RESULTS) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    plot_optimal_k(out_dir / "theory_optimal_k.png")
    plot_goodput(out_dir / "theory_goodput_batch.png")
    h100, h200 = ridge(theory.H100_SXM), ridge(theory.H200)
    text = [
        "# Theory report (generated by `python -m paper_repro.theory`)", "",
        "Derivations and source tags: docs/theory.md. Formulas: `specjax.theory`.", "",
        "## Expected tokens per iteration, E[n] = (1 − α^(k+1))/(1 − α) [SRC Leviathan eq. 1]",
        "", *seed_table(), "",
        "## Optimal lookahead [DERIVED, Lambert W₋₁ + Newton]", "", *gamma_table(), "",
        "![optimal lookahead](theory_optimal_k.png)", "",
        "## Batch size: ridge and k*(B) [DERIVED; hardware numbers 2ND]", "",
        f"Ridge n* = F·b/(2·BW), BF16: H100 SXM {h100:.2f}, H200 {h200:.2f} tokens.",
        *policy_tables(), "", "![goodput vs batch](theory_goodput_batch.png)", "",
        "## SDSL rebuild [DERIVED from 2ND coefficients]", "", *sdsl_section(), "",
        "## Simulation check of E[n] [DERIVED pair, real JAX verifier]", "",
        *simulation_section(), "",
    ]
    path = out_dir / "theory.md"
    path.write_text("\n".join(text) + "\n")
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m paper_repro.theory", description=__doc__)
    parser.add_argument("--alpha", type=float, help="mean per-token acceptance rate in [0, 1]")
    parser.add_argument("--c", type=float, help="draft/target cost ratio per forward, > 0")
    parser.add_argument("--batch", type=int, help="batch size (uses the roofline goodput model)")
    parser.add_argument("--gpu", choices=sorted(GPUS), default="h100")
    parser.add_argument("--k-max", type=int, default=32, help="largest lookahead searched")
    parser.add_argument("--report", action="store_true", help="write results/theory.md")
    args = parser.parse_args(argv)
    if args.alpha is None and args.c is None:
        print(f"wrote {write_report()}")
        return
    if args.alpha is None or args.c is None:
        parser.error("--alpha and --c go together")
    try:
        if args.batch is None:
            k, gamma = theory.optimal_k(args.alpha, args.c, k_max=args.k_max)
            print(f"k* = {k}  (continuous γ* = {gamma:.4f}, speedup "
                  f"{theory.speedup(args.alpha, k, args.c):.4f})")
        else:
            n_star = ridge(GPUS[args.gpu])
            k = theory.k_policy(args.alpha, args.c, [args.batch], ridge=n_star,
                                k_max=args.k_max)[args.batch]
            s = theory.batch_speedup(args.batch, args.alpha, k, args.c, ridge=n_star)
            print(f"k* = {k}  (batch {args.batch} on {GPUS[args.gpu].name}, ridge "
                  f"{n_star:.1f} tokens, speedup over AR {s:.4f})")
    except ValueError as e:
        parser.error(str(e))
    if args.report:
        print(f"wrote {write_report()}")


if __name__ == "__main__":
    main()
