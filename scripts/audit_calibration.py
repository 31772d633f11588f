"""The audit's chi-square tests when both samplers share one law, over 200 seeds: alarm rate at level 0.05,
uniformity of the p-values (Kolmogorov-Smirnov), and the combined test's alarm rate.

    python scripts/audit_calibration.py
"""
from verispec.audit import calibration

fp_rate, ks_p, combined = calibration(seeds=200)
print(f"per-position test: alarm rate {fp_rate:.3f} at level 0.05; KS p-value of its p-values vs uniform {ks_p:.3f}")
print(f"combined audit (joint + per position, Bonferroni): alarm rate {combined:.3f} at level 0.05")
