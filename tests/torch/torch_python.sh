# Sourced by the scripts that run PyTorch: sets $python to the first
# interpreter that imports torch ($DSMPI_TORCH_PYTHON, Debian's
# /usr/bin/python3, python3 on the PATH), or skips the caller (exit 77)
# naming it ($1) when none does.
python=""
for p in ${DSMPI_TORCH_PYTHON:-} /usr/bin/python3 python3; do
    if "$p" -c "import torch" >/dev/null 2>&1; then
        python=$p
        break
    fi
done
if [ -z "$python" ]; then
    echo "$1: skipped: no python with torch (set DSMPI_TORCH_PYTHON)"
    exit 77
fi
