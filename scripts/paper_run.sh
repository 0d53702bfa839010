#!/usr/bin/env bash
# The paper-size reference run (preset `paper`) on the full Blog Authorship Corpus, in parts that each fit
# one working session; every part resumes (content-keyed caches, done-markers) and its tables, figures and
# run.json are copied to docs/paper_run/<part>/ to be committed (never the caches).
#
#   bash scripts/paper_run.sh [PART] [DATA] [--set key=value ...]
#
# PART: quick  — the main job itself (`pe-kit reproduce --preset quick`, every notebook, bundled sample; DATA is
#                ignored): run it on a fresh PE_KIT_CACHE to record the cold time (run.json "seconds")
#       long   — notebook 04 (Table 2/4 analogue), long arm (bloggers with exactly 64 posts)
#       short  — notebook 04, short arm (32–64 posts cut to tweet length)
#       long-bankB, short-bankB — notebook 04 on the paper's bank B only (label + three public examples, App. C;
#                pe_kit/data_files/blogs-bankB-smollm2.jsonl.gz, built by scripts/make_bank_b.py): Table 4's
#                bank-B rows. Its 128 example authors come from the public split of the short arm at seed 0 (and
#                have < 64 posts), so reserving them leaves both arms' canary, aux, calibration and test users as
#                in parts long and short: the same canaries, beside their bank-A rows.
#       checks — notebooks 01–03 and 05 (LLR checks, probe design, Fig. 1 sweeps at 5·10⁶ trials), short arm
#       multi  — notebook 06 (Fig. 2 analogue)
#       onerun — notebook 08 (one-run audits, issue 16) on the world of part `long` (long arm, bank A, N=600):
#                q = 1 and 0.1 at σ = 1, nonce canaries at the largest m the bank fits (1,638 at p = 8192, share 1)
#                beside the multi-trial ε_lower (10⁶ trials) and ε_theory; Mahloujifar et al.'s Table 1 checks;
#                the idealised game at m = 10³, 10⁴. Pass the same --set values as part `long` (e.g.
#                max_seq_length) so the world key matches and its cached embeddings are reused. ~15 min on 2 cores.
# DATA: default ../shared/data/blogs/blogs.jsonl.gz (3,843 bloggers; 1,957 have 64 posts).
#
# N (test users = calibration users) is as large as the corpus allows with 25 canaries, 500 aux users and
# ≥ 128 bloggers left for the public bank (p = 8192 texts): 600 on the long arm, 1000 on the short arm.
set -euo pipefail
cd "$(dirname "$0")/.."
part=${1:-long}
[ $# -gt 0 ] && shift
data=../shared/data/blogs/blogs.jsonl.gz
if [ $# -gt 0 ] && [[ "$1" != --* ]]; then data=$1; shift; fi
# anything after PART and DATA goes to pe-kit reproduce (e.g. --set max_seq_length=64)
export HF_HUB_OFFLINE=1
preset=(--preset paper --data "$data" --format blogs)
case "$part" in
  quick)  preset=(--preset quick); args=() ;;
  long)   args=(--notebooks 04 --set arms=long --set n_test=600 --set n_calibration=600) ;;
  short)  args=(--notebooks 04 --set arms=short) ;;
  long-bankB)  args=(--notebooks 04 --set arms=long --set banks=bankB --set bank=bankB --set n_test=600 --set n_calibration=600) ;;
  short-bankB) args=(--notebooks 04 --set arms=short --set banks=bankB --set bank=bankB) ;;
  checks) args=(--notebooks 01,02,03,05 --set arm=short --set sweep_arm=short) ;;
  multi)  args=(--notebooks 06 --set arm=long --set n_test=600 --set n_calibration=600) ;;
  onerun) args=(--notebooks 08 --set arm=long --set bank=bankA --set n_test=600 --set n_calibration=600) ;;
  *) echo "unknown part '$part': use quick, long, short, long-bankB, short-bankB, checks, multi or onerun" >&2; exit 2 ;;
esac
.venv/bin/pe-kit reproduce "${preset[@]}" --run-id "paper-$part" ${args[@]+"${args[@]}"} "$@"
dest=docs/paper_run/$part
mkdir -p "$dest/figures"
cp results/paper-$part/results.md results/paper-$part/results.csv results/paper-$part/run.json "$dest/"
cp results/paper-$part/figures/*.png "$dest/figures/" 2>/dev/null || true
# committed copies name data beside the checkout relative to the repository root (../shared/data/…), not by
# this machine's absolute path
parent=$(cd .. && pwd)
sed -i "s#${parent}/#../#g" "$dest/results.md" "$dest/results.csv" "$dest/run.json"
echo "copied to $dest (commit it)"
