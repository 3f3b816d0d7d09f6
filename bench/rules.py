#!/usr/bin/env python3
"""The rules alloclab has judged by, on the same real runs: the oldest (alpha/K a look, Yuen's df
h - 1), Hwang-Shih-DeCani alpha spending (gamma -2) with df h - 2 and non-binding futility, and the
current one, which also leaves fewer than 6 blocks untrimmed. Stored experiments re-analysed, and resampled
sequential experiments built from their real within-block log-ratios.

  * re-analysis: every primary comparison of each store walked through its design's looks with
    the blocks it had, judged by decide.judge under each rule; decided count, median final width,
    and every comparison's final verdict;
  * resampling: the real log-ratios of the comparisons that ran at least `--min-blocks` blocks,
    centred on their trimmed mean, cut into segments of 8 consecutive blocks (the drift within a
    segment kept) and rebuilt into sequences of the design's length, each block's sign flipped at
    random (swapping the two labels of a block: an exact A/A null with the real noise). Injected
    effects add log(1.05) or log(1.10) to every block (one arm multiplied by 1.05 / 1.10).
    A family of 7 is 7 such comparisons judged at alpha/7 each.
  * races: families of 10 candidates, each a resampled sequence as above (independent draws: the
    union bound's worst case; real candidates share the default's runs), judged at every look of
    the race design as the runner does (a decided candidate leaves), with +15% injected in one of
    them: the share of that one decided better by 8, 12 and 16 blocks, and the A/A rate over every
    verdict of the family (a false better or worse among the nulls, or the injected one decided
    worse or equivalent), with its 95% Wilson interval; for the race design before Design.race
    (compare's looks with an early look at 6: 6, 10, 16, ... 300) and for Design.race planned over
    a budget's horizon of 20 and 40 blocks.
Pure computation on stored data (no process is run); about two minutes on one core.
Usage: python bench/rules.py STORE.db [STORE.db ...] [--draws 4000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys

import numpy as np
from scipy import special

from alloclab.plan.design import DF_DROP, SPENDING_GAMMA, TRIM_FROM, Design
from alloclab.stats import decide
from alloclab.stats.analysis import analyze
from alloclab.store.db import Store

# name: (HSD gamma or None for alpha/K a look, degrees of freedom below Yuen's h - 1, blocks from
# which the 20% trim applies); the last is the rule in force, the one before it what it replaced.
RULES = {"old: alpha/K a look, df h-1": (None, 0, 0),
         f"HSD {SPENDING_GAMMA:g}, df h-{1 + DF_DROP}; futility": (SPENDING_GAMMA, DF_DROP, 0),
         f"the same, trimmed from {TRIM_FROM} blocks": (SPENDING_GAMMA, DF_DROP, TRIM_FROM)}
SEGMENT = 8
MARGIN = 0.02


# --- re-analysis of stored experiments ----------------------------------------------------------

def comparisons(path: str):
    """(workload, variant, higher_is_better, [(block, base, cand)], family, design) per primary comparison.
    `path` may name the experiment: STORE.db:3 (a tune store's race); else its first."""
    store, _, exp = path.partition(":")
    a = analyze(Store(store).load(int(exp or 1)), only_primary=True)
    for w in a.workloads:
        row = w.primary()
        if row is None:
            continue
        base = row.cells[a.baseline_idx]
        bmap = dict(zip(base.blocks, base.values))
        cands = [c for c in row.cells if c.variant_idx != a.baseline_idx and c.values]
        for c in cands:
            pairs = sorted((k[1], bmap[k], v) for k, v in zip(c.blocks, c.values) if k in bmap)
            yield w.name, a.labels[c.variant_idx], row.higher_is_better, pairs, len(cands), a.design


def walk(pairs, hib, family, design: Design, futility: bool):
    """The sequential rule on one comparison's blocks in order: the first look that decides, else
    the last analysis (a planned look, or the budget's stop between looks)."""
    n_all = len(pairs)
    stops = [n for n in design.looks if n < n_all] + [n_all]
    for n in stops:
        b = [x for _, x, _ in pairs[:n]]
        c = [y for _, _, y in pairs[:n]]
        blocks = list(range(n))
        c = decide.judge(b, c, hib, margin=MARGIN, design=design, blocks=n, family=family, base_blocks=blocks,
                         cand_blocks=blocks, reachable=design.looks[-1] if futility else None)
        if c.verdict in decide.DECIDED or c.futile or n == n_all:
            return c, n


def reanalyse(paths: list[str]) -> dict:
    out = {}
    for path in paths:
        rows = []
        for wname, label, hib, pairs, family, design in comparisons(path):
            r = {"workload": wname, "variant": label, "blocks": len(pairs)}
            for name, (gamma, drop, trim_from) in RULES.items():
                d = Design(design.alpha, design.looks, gamma, drop, trim_from=trim_from)
                c, n = walk(pairs, hib, family, d, futility=gamma is not None)
                r[name] = {"verdict": "futile" if c.futile else c.verdict, "n": n, "ratio": c.ratio,
                           "lo": c.ci_low, "hi": c.ci_high, "level": 1 - c.confidence, "more_runs": c.more_runs,
                           "text": decide.estimates.format_comparison(c)}
            rows.append(r)
        out[path] = rows
    return out


# --- resampling -------------------------------------------------------------------------------------

def sources(path: str, min_blocks: int) -> list[np.ndarray]:
    out = []
    for *_, pairs, _, _ in comparisons(path):
        d = np.array([math.log(y / x) for _, x, y in pairs if x > 0 and y > 0])
        if d.size >= min_blocks:
            out.append(d - decide.yuen(d, 0.95)[0])
    return out


def resample(srcs, draws: int, length: int, rng) -> np.ndarray:
    out = np.empty((draws, length))
    for i in range(draws):
        s = srcs[rng.integers(len(srcs))]
        parts, total = [], 0
        while total < length:
            start = rng.integers(0, max(1, s.size - SEGMENT + 1))
            parts.append(s[start:start + SEGMENT])
            total += parts[-1].size
        out[i] = np.concatenate(parts)[:length] * rng.choice([-1.0, 1.0], size=length)
    return out


def yuen_rows(d: np.ndarray, drop: int, trim_from: int, trim: float = decide.TRIM, plain_t: bool = False):
    """decide.yuen on every row (the last axis): trimmed mean, standard error, df (h - 1 - drop); the
    plain paired t below `trim_from` where `plain_t`."""
    n = d.shape[-1]
    s = np.sort(d, axis=-1)
    g = int(math.floor(trim * n)) if n >= trim_from else 0
    w = np.clip(s, s[..., [g]], s[..., [n - g - 1]])
    plain = plain_t and not g
    factor = 1.0 if plain else 1 - 2 * trim
    return (s[..., g:n - g].mean(axis=-1), w.std(axis=-1, ddof=1) / (factor * math.sqrt(n)),
            max(1, n - 2 * g - 1 - (0 if plain else drop)))


def simulate(D: np.ndarray, design: Design, family: int, futility: bool):
    """Vectorized decide.judge walk: verdict (0 undecided, 1 lower, 2 higher, 3 equivalent, 4 futile),
    blocks used, final interval width (log)."""
    draws = D.shape[0]
    verdict, used, width = np.zeros(draws, int), np.full(draws, design.looks[-1]), np.full(draws, np.nan)
    open_ = np.ones(draws, bool)
    lm = math.log1p(MARGIN)
    for n, a in zip(design.looks, design.look_alphas):
        tm, se, df = yuen_rows(D[:, :n], design.df_drop, design.trim_from)
        level = a / family
        q = special.stdtrit(df, 1 - level / 2)
        lo, hi = tm - q * se, tm + q * se
        v = np.where((lo > -lm) & (hi < lm), 3, np.where(lo > 0, 2, np.where(hi < 0, 1, 0)))
        if futility and design.looks[0] < n < design.looks[-1]:      # as decide.futile
            N = design.looks[-1]
            q_end = special.stdtrit(df * N / n, 1 - (design.alpha - design.spent(n)) / family / 2)
            est = np.abs(tm)
            target = np.maximum(est + se, lm - np.maximum(0.0, est - se))
            need = np.ceil((se * math.sqrt(n) * q_end / target) ** 2) - n
            r = math.log1p(max(decide.NARROW_MIN, decide.NARROW_FACTOR * MARGIN))
            narrow = (lo >= -r) & (hi <= r)
            v = np.where((v == 0) & narrow & (need > decide.FUTILITY_FACTOR * (N - n)), 4, v)
        new = open_ & (v > 0)
        verdict[new], used[new], width[new] = v[new], n, (hi - lo)[new]
        if n == design.looks[-1]:
            width[open_ & ~new] = (hi - lo)[open_ & ~new]
        open_ &= ~new
    return verdict, used, width


def resampled(paths: list[str], looks, draws: int, min_blocks: int, seed: int) -> dict | None:
    srcs = [s for path in paths for s in sources(path, min_blocks)]
    if not srcs:
        return None
    rng = np.random.default_rng(seed)
    D = resample(srcs, draws, looks[-1], rng)
    out = {"sources": len(srcs), "looks": list(looks), "rules": {}}
    for name, (gamma, drop, trim_from) in RULES.items():
        d = Design(0.05, tuple(looks), gamma, drop, trim_from=trim_from)
        r = {}
        for fam in (1, 7):
            v, n, w = simulate(D, d, fam, gamma is not None)
            fp = float(np.mean((v == 1) | (v == 2)))
            r[f"fp_m{fam}"] = fp if fam == 1 else min(1.0, fam * fp)   # union over 7 (at most)
            fp1 = float(np.mean(((v == 1) | (v == 2)) & (n == looks[0])))
            r[f"fp_first_m{fam}"] = fp1 if fam == 1 else min(1.0, fam * fp1)
            if fam == 1:
                r["aa_equivalent"] = float(np.mean(v == 3))
                r["aa_futile"] = float(np.mean(v == 4))
            for eff in (0.05, 0.10, 1.0):
                v2, n2, w2 = simulate(D + math.log1p(eff), d, fam, gamma is not None)
                hit = v2 == 2
                r[f"power{int(eff * 100)}_m{fam}"] = float(np.mean(hit))
                # Decided at the first look: what a recipe's budget often leaves a candidate.
                r[f"first{int(eff * 100)}_m{fam}"] = float(np.mean(hit & (n2 == looks[0])))
                if fam == 1:
                    # Runs by which half (a quarter) of all experiments had decided it, an undecided
                    # one counting as never: the median over decided ones alone would favour a rule
                    # that decides fewer (its extra verdicts come late).
                    never = np.where(hit, n2, np.inf)
                    r[f"runs{int(eff * 100)}"] = float(np.quantile(never, 0.5, method="higher"))
                    r[f"runs{int(eff * 100)}_q25"] = float(np.quantile(never, 0.25, method="higher"))
                    r[f"runs{int(eff * 100)}_decided"] = float(np.median(n2[hit])) if hit.any() else math.nan
                    r[f"width{int(eff * 100)}"] = float(np.median(np.expm1(w2[hit]))) if hit.any() else math.nan
                    r[f"runs{int(eff * 100)}_all"] = float(np.mean(n2))
        out["rules"][name] = r
    return out


# --- races of 10 -------------------------------------------------------------------------------------

RACE_M = 10
RACE_EFFECT = 0.15


def race_walk(D: np.ndarray, design: Design):
    """Every family of D (draws x candidates x blocks) judged at the design's looks; a decided candidate
    leaves. Verdict per candidate (0 open, 1 lower, 2 higher, 3 equivalent) and the blocks it ended at."""
    draws, m, _ = D.shape
    verdict, used = np.zeros((draws, m), int), np.full((draws, m), design.looks[-1])
    open_ = np.ones((draws, m), bool)
    lm = math.log1p(MARGIN)
    for n, a in zip(design.looks, design.look_alphas):
        tm, se, df = yuen_rows(D[:, :, :n], design.df_drop, design.trim_from, plain_t=design.plain_t)
        q = special.stdtrit(df, 1 - a / m / 2)
        lo, hi = tm - q * se, tm + q * se
        v = np.where((lo > -lm) & (hi < lm), 3, np.where(lo > 0, 2, np.where(hi < 0, 1, 0)))
        new = open_ & (v > 0)
        verdict[new], used[new] = v[new], n
        open_ &= ~new
    return verdict, used


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


RACE_DESIGNS = {"before: compare's looks and an early one (6, 10, 16 .. 300)": Design.sequential(10, 300, early=6),
                "Design.race over 20 blocks": Design.race(20),
                "Design.race over 40 blocks": Design.race(40)}


def races(paths: list[str], draws: int, min_blocks: int, seed: int) -> dict | None:
    srcs = [s for path in paths for s in sources(path, min_blocks)]
    if not srcs:
        return None
    rng = np.random.default_rng(seed)
    longest = max(d.looks[-1] for d in RACE_DESIGNS.values())
    D = np.stack([resample(srcs, draws, longest, rng) for _ in range(RACE_M)], axis=1)
    out = {"sources": len(srcs), "draws": draws, "candidates": RACE_M, "effect": RACE_EFFECT, "designs": {}}
    for name, design in RACE_DESIGNS.items():
        d = D[:, :, :design.looks[-1]]
        v, _ = race_walk(d, design)
        aa = ((v == 1) | (v == 2)).any(axis=1)
        inj = d.copy()
        inj[:, 0, :] += math.log1p(RACE_EFFECT)
        v2, n2 = race_walk(inj, design)
        hit = v2[:, 0] == 2
        wrong = ((v2[:, 1:] == 1) | (v2[:, 1:] == 2)).any(axis=1) | (v2[:, 0] == 1) | (v2[:, 0] == 3)
        r = {"looks": list(design.looks), "aa": float(aa.mean()), "aa_ci": wilson(int(aa.sum()), draws),
             "aa_injected": float(wrong.mean()), "aa_injected_ci": wilson(int(wrong.sum()), draws)}
        for by in (8, 12, 16):
            r[f"decided_by_{by}"] = float(np.mean(hit & (n2[:, 0] <= by)))
        r["decided_at_end"] = float(hit.mean())
        out["designs"][name] = r
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("stores", nargs="+")
    p.add_argument("--draws", type=int, default=4000)
    p.add_argument("--min-blocks", type=int, default=12)
    p.add_argument("--json")
    args = p.parse_args(argv)
    report = {"reanalysis": reanalyse(args.stores), "resampled": {}}
    for path in args.stores:
        design = next(comparisons(path))[5]
        contexts = {"own looks": design.looks}
        if "demo" in path:
            contexts["compare's looks (10..300)"] = Design.sequential(10, 300).looks
        for ctx, looks in contexts.items():
            x = resampled([path], looks, args.draws, args.min_blocks, 1)
            if x:
                report["resampled"][f"{path} | {ctx}"] = x
    # Every store's comparisons pooled, at the looks of a recipe (5 to 30) and of a tune race (6, 10 to 300).
    for ctx, looks in {"a recipe's looks": Design.sequential(5, 30).looks,
                       "a race's looks": Design.sequential(10, 300, early=6).looks}.items():
        x = resampled(args.stores, looks, args.draws, args.min_blocks, 1)
        if x:
            report["resampled"][f"all stores pooled | {ctx}"] = x
    report["races"] = races(args.stores, args.draws, args.min_blocks, 1)
    print_report(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, default=str)
    return 0


def print_races(x: dict | None) -> None:
    if not x:
        return
    print()
    print(f"## races of {x['candidates']} candidates ({x['sources']} real comparisons resampled, {x['draws']} "
          f"races; +{x['effect']:.0%} injected in one)")
    for name, v in x["designs"].items():
        lo, hi = v["aa_ci"]
        lo2, hi2 = v["aa_injected_ci"]
        print(f"  {name}: looks {v['looks'][:7]}{' ...' if len(v['looks']) > 7 else ''}")
        print(f"    +{x['effect']:.0%} decided by 8 blocks {v['decided_by_8']:.1%}, by 12 {v['decided_by_12']:.1%}, "
              f"by 16 {v['decided_by_16']:.1%}, at the design's end {v['decided_at_end']:.1%} | A/A over the "
              f"family {v['aa']:.2%} [{lo:.2%}, {hi:.2%}]; with the injected one {v['aa_injected']:.2%} "
              f"[{lo2:.2%}, {hi2:.2%}]")


def print_report(r: dict) -> None:
    names = list(RULES)
    for path, rows in r["reanalysis"].items():
        print(f"## {path}: primary comparisons re-analysed")
        for name in names:
            decided = [x for x in rows if x[name]["verdict"] in decide.DECIDED]
            widths = [100 * (x[name]["hi"] - x[name]["lo"]) / x[name]["ratio"] for x in rows
                      if math.isfinite(x[name]["hi"] - x[name]["lo"])]
            dec_w = [100 * (x[name]["hi"] - x[name]["lo"]) / x[name]["ratio"] for x in decided]
            print(f"  {name}: decided {len(decided)} of {len(rows)}, futile {sum(x[name]['verdict'] == 'futile' for x in rows)}; "
                  f"median final width {np.median(widths):.1f} points (decided ones {np.median(dec_w) if dec_w else math.nan:.1f}); "
                  f"median runs {np.median([x[name]['n'] for x in rows]):.0f}")
        for x in rows:
            a, b = (x[n] for n in names[-2:])
            if a["text"] != b["text"]:
                print(f"    {x['workload'][:32]:32s} {x['variant'][:26]:26s} {a['text']} ({a['n']})  ->  {b['text']} ({b['n']})")
    print()
    print("## resampled real log-ratios (A/A: label swaps of centred blocks; +5%/+10%: one arm scaled)")
    for ctx, x in r["resampled"].items():
        print(f"  {ctx}: {x['sources']} real comparisons, looks {x['looks']}")
        for name, v in x["rules"].items():
            print(f"    {name:32s} FP m=1 {v['fp_m1']:.2%} (first look {v['fp_first_m1']:.2%}), m=7 <= {v['fp_m7']:.2%} "
                  f"(first look {v['fp_first_m7']:.2%}) | x2 at the first look: {v['first100_m1']:.1%} (m=7 "
                  f"{v['first100_m7']:.1%}) | +5%: {v['power5_m1']:.1%} "
                  f"(m=7 {v['power5_m7']:.1%}) runs q25/q50 {v['runs5_q25']:.0f}/{v['runs5']:.0f} (decided ones {v['runs5_decided']:.0f}), "
                  f"width {v['width5']:.1%} | +10%: {v['power10_m1']:.1%} (m=7 {v['power10_m7']:.1%}) runs q25/q50 "
                  f"{v['runs10_q25']:.0f}/{v['runs10']:.0f} (decided ones {v['runs10_decided']:.0f}), width {v['width10']:.1%} | "
                  f"A/A equivalent {v['aa_equivalent']:.1%}, futile {v['aa_futile']:.1%}; mean runs A/A-like +5% {v['runs5_all']:.0f}")
    print_races(r.get("races"))


if __name__ == "__main__":
    sys.exit(main())
