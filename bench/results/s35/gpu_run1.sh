#!/bin/bash
# The device run (session 35): set up from the parts carried to /root/pay, then the check, after and before.
export VERISPEC_HOME=/root/vh VERISPEC_KERNELS=0 PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /root/pay/*.whl || exit 1
mkdir -p $VERISPEC_HOME/downloads
cat /root/pay/p1 /root/pay/p2 > $VERISPEC_HOME/downloads/SmolLM2-135M-Instruct.Q4_1.gguf
for d in verispec .old/verispec; do mkdir -p $d/drafts; cp -r /root/pay/drafts/* $d/drafts/; done
ls verispec/drafts .old/verispec/drafts
nvidia-smi --query-gpu=name,memory.used --format=csv
S=$(date +%s)
timeout 330 python3 scripts/cuda_check.py --out $OUT/after --parts pass,exactness,syncs,methods,t1,profile 2>&1 \
  | tee $OUT/after_log.txt | grep -v Warning | grep -v "^\[syncs\|^\[profile\|^  torch._C"
echo "after: $(( $(date +%s) - S )) s"
S=$(date +%s)
timeout 200 python3 .old/scripts/cuda_check.py --out $OUT/before --repeats 1 --parts syncs,methods,t1 2>&1 \
  | tee $OUT/before_log.txt | grep -v Warning | grep -v "^\[syncs\|^  torch._C"
echo "before: $(( $(date +%s) - S )) s"
