#!/usr/bin/env bash
# The seed's 1000-step validation, vkh2o-validate beside a plain PyTorch loop of the same steps
# (scripts/validate-torch.py), in one run on this machine: steps per second of each and their
# ratio, for the latent (vkh2o-validate's default) and the expanded layout, vkh2o-validate with
# a step's layers together (its default) and apart. Needs a build
# (BUILD_DIR, default build) and Debian's python3-torch (installed when missing, as root).
# Usage: bash scripts/validate-speed.sh [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
STEPS=${1:-1000}
[ -x "$BUILD_DIR/vkh2o-validate" ] || { echo "validate-speed: no $BUILD_DIR/vkh2o-validate: run bash scripts/vkh2o.sh build" >&2; exit 1; }
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
    [ "$(id -u)" -eq 0 ] || { echo "validate-speed: python3-torch is missing (apt-get install python3-torch)" >&2; exit 1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-torch libopenblas0-pthread >/dev/null
fi
# vkh2o-validate twice: a step's four layers in the same dispatches (its default:
# vkh2o_kvcache_step.num_layers), and --layers-apart, one step per layer as a model decodes
for layout in latent expanded; do
    v=$("$BUILD_DIR/vkh2o-validate" --steps "$STEPS" --layout "$layout" --quiet | sed -n 's/.*(\([0-9.]*\) steps\/sec).*/\1/p')
    a=$("$BUILD_DIR/vkh2o-validate" --steps "$STEPS" --layout "$layout" --layers-apart --quiet | sed -n 's/.*(\([0-9.]*\) steps\/sec).*/\1/p')
    t=$(/usr/bin/python3 scripts/validate-torch.py --steps "$STEPS" --layout "$layout" | sed -n 's/.*s, \([0-9.]*\) steps\/s.*/\1/p')
    awk -v l="$layout" -v v="$v" -v a="$a" -v t="$t" -v n="$STEPS" \
        'BEGIN { printf "%s, %d steps, 4 layers, 4 heads, budget 64: vkh2o-validate %.1f steps/s (layers apart %.1f), PyTorch loop %.1f steps/s: %.2fx (%.2fx)\n", l, n, v, a, t, v / t, a / t }'
done
