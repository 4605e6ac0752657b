#!/bin/sh
# Makes .megatron/ (ignored by git, small enough to carry to a device machine) from a Megatron-LM
# git directory: only the files the exec2 adapter python/dsa_parity/adapters/megatron.py loads,
# taken with `git archive` at one commit, and COMMIT naming that commit.
#   tools/megatron_fetch.sh MEGATRON_GIT_DIR [COMMIT] [DEST]      (COMMIT default HEAD, DEST .megatron)
# then: MEGATRON_PATH=$PWD/.megatron
set -eu
src=${1:?usage: tools/megatron_fetch.sh MEGATRON_GIT_DIR [COMMIT] [DEST]}
rev=${2:-HEAD}
dest=${3:-.megatron}
gitdir=$(git -C "$src" rev-parse --absolute-git-dir)
commit=$(git --git-dir="$gitdir" rev-parse "$rev^{commit}")
rm -rf "$dest"
mkdir -p "$dest"
git --git-dir="$gitdir" archive "$commit" LICENSE \
  megatron/core/transformer/experimental_attention_variant \
  megatron/core/packed_seq_params.py \
  megatron/core/tensor_parallel/mappings.py \
  megatron/core/transformer/enums.py | tar -x -C "$dest"
echo "$commit" > "$dest/COMMIT"
echo "$dest: Megatron-LM $commit ($(du -sk "$dest" | cut -f1) KiB)"
