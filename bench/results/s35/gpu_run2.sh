#!/bin/bash
# The second device run (session 35): EAGLE's trees drafted in one graph (DraftGraph), and pass by pass, side by side.
export VERISPEC_HOME=/root/vh VERISPEC_KERNELS=0 PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /root/pay/*.whl || exit 1
mkdir -p $VERISPEC_HOME/downloads verispec/drafts
cat /root/pay/p1 /root/pay/p2 > $VERISPEC_HOME/downloads/SmolLM2-135M-Instruct.Q4_1.gguf
cp -r /root/pay/drafts/* verispec/drafts/
S=$(date +%s)
timeout 400 python3 scripts/cuda_check.py --out $OUT/graph --repeats 1 --parts pass,syncs,methods,t1,profile,stepwise 2>&1 \
  | tee $OUT/graph_log.txt | grep -v Warning | grep -v "^\[syncs\|^\[profile\|^  torch._C\|^\[stepwise\|^\[methods\|^\[t1"
echo "graph: $(( $(date +%s) - S )) s"
