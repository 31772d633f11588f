"""Why verispec attends verified rows one at a time: does one masked attention call over n rows give each row
bitwise the output of attending it alone (as decoding it alone does)? PyTorch's CPU scaled_dot_product_attention,
bf16, the default model's head shapes (9 query heads, 3 key/value heads, 64 wide), random inputs, for chains of
n = 2, 5 and 8 rows after S0 cached tokens. Prints how many (S0, n) cases differ anywhere, and the largest
difference (bench/results/attention_rows.txt):

    python scripts/attention_rows.py
"""
import torch
import torch.nn.functional as F


def main(heads=9, kv_heads=3, d=64):
    torch.manual_seed(0)
    cases = differ = 0
    worst = 0.0
    for n in (2, 5, 8):
        for s0 in range(1, 700, 7):
            s = s0 + n
            q = torch.randn(1, heads, n, d).bfloat16()
            k, v = torch.randn(2, 1, kv_heads, s, d).bfloat16()
            alone = torch.cat([F.scaled_dot_product_attention(q[:, :, i:i + 1], k[:, :, :s0 + i + 1],
                                                              v[:, :, :s0 + i + 1], enable_gqa=True)
                               for i in range(n)], 2)
            mask = torch.arange(s)[None, :] <= torch.arange(s0, s0 + n)[:, None]          # row i sees s0 + i + 1
            together = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
            cases += 1
            if not torch.equal(alone, together):
                differ += 1
                worst = max(worst, (alone.float() - together.float()).abs().max().item())
    print(f"torch {torch.__version__}: {differ} of {cases} cases differ from row-by-row attention "
          f"(largest difference {worst:.2e})")


if __name__ == "__main__":
    main()
