# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

# Bash completion for the memcuda tools: each tool's options as its own --help lists them (read
# once per shell, so they cannot drift from the tool), values for the options that take a known
# set, and tensor names from `mcd-ls -q`.
_mcd_tensor_names() {
  mcd-ls -q 2>/dev/null
}

# The options in the "Options:" section of `TOOL --help`, space-separated, cached per tool.
_mcd_options() {
  local var="_mcd_options_${1//[^A-Za-z0-9]/_}"
  if [ -z "${!var:-}" ]; then
    printf -v "$var" '%s' "$("$1" --help 2>/dev/null | awk '
      /^Options:/ { in_options = 1; next }
      in_options && /^$/ { exit }
      in_options && /^  -/ { n = split($1, names, ","); for (i = 1; i <= n; i++) printf "%s ", names[i] }')"
  fi
  printf '%s' "${!var}"
}

_mcd_complete() {
  local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}" cmd="${COMP_WORDS[0]}"
  case "$prev" in
    --dtype) COMPREPLY=($(compgen -W "f16 bf16 f32 f64 i8 i16 i32 i64 u8 u16 u32 u64 bool" -- "$cur")); return ;;
    # Host memory ("cpu") where the tool takes it: mcd-create's tensors; mcd-bench and
    # mcd-d3d-probe measure a GPU.
    --device)
      local devices="0 1 2 3 4 5 6 7"
      [[ "${cmd##*/}" == mcd-create ]] && devices="cpu $devices"
      COMPREPLY=($(compgen -W "$devices" -- "$cur")); return ;;
    --sort) COMPREPLY=($(compgen -W "name bytes age refs device state node" -- "$cur")); return ;;
    --lifetime) COMPREPLY=($(compgen -W "heap stack" -- "$cur")); return ;;
    --init) COMPREPLY=($(compgen -W "zero none" -- "$cur")); return ;;
    --allocator) COMPREPLY=($(compgen -W "cuda pool" -- "$cur")); return ;;
    --devices) COMPREPLY=($(compgen -W "all cpu 0 0,1" -- "$cur")); return ;;
    --from|--output|--pool-socket|--command-socket|--redis-server) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    -o) [[ "${cmd##*/}" != mcd-ls ]] && COMPREPLY=($(compgen -f -- "$cur")); return ;;  # mcd-ls: --columns
  esac
  if [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "$(_mcd_options "$cmd")" -- "$cur"))
  elif [[ "${cmd##*/}" == mcd-get || "${cmd##*/}" == mcd-rm ]]; then
    COMPREPLY=($(compgen -W "$(_mcd_tensor_names)" -- "$cur"))
  fi
}
complete -F _mcd_complete mcd-create mcd-get mcd-rm mcd-ls mcd-serve mcd-bench mcd-d3d-probe \
  mcd-example-scale mcd-example-c
