#!/bin/bash
# The third device run (session 35): EAGLE's chain drafted in one graph too (DraftGraph, chain_draft).
export VERISPEC_HOME=/root/vh VERISPEC_KERNELS=0 PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /root/pay/*.whl || exit 1
mkdir -p $VERISPEC_HOME/downloads verispec/drafts
cat /root/pay/p1 /root/pay/p2 > $VERISPEC_HOME/downloads/SmolLM2-135M-Instruct.Q4_1.gguf
cp -r /root/pay/drafts/* verispec/drafts/
S=$(date +%s)
timeout 200 python3 scripts/cuda_check.py --out $OUT/chain --repeats 1 --parts syncs,methods,t1 2>&1 \
  | tee $OUT/chain_log.txt | grep -v Warning | grep -v "^\[syncs\|^  torch._C\|^\[methods\|^\[t1"
echo "chain: $(( $(date +%s) - S )) s"
