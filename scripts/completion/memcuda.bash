# Bash completion for the memcuda tools: options, and tensor names from `mcd-ls -q`.
_mcd_tensor_names() {
  mcd-ls -q 2>/dev/null
}

_mcd_complete() {
  local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}" cmd="${COMP_WORDS[0]##*/}"
  local common="--redis-url --timeout-ms --node --prefix --queue --help --version"
  case "$prev" in
    --dtype) COMPREPLY=($(compgen -W "f16 bf16 f32 f64 i8 i16 i32 i64 u8 u16 u32 u64 bool" -- "$cur")); return ;;
    --device) COMPREPLY=($(compgen -W "cpu 0 1 2 3 4 5 6 7" -- "$cur")); return ;;
    --lifetime) COMPREPLY=($(compgen -W "heap stack" -- "$cur")); return ;;
    --init) COMPREPLY=($(compgen -W "zero none" -- "$cur")); return ;;
    --devices) COMPREPLY=($(compgen -W "all cpu 0 0,1" -- "$cur")); return ;;
    --from|-o|--output) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    --redis-url|--timeout-ms|--node|--prefix|--queue|--shape|--owner-pid|--print) return ;;
  esac
  local opts
  case "$cmd" in
    mcd-create) opts="--dtype --shape --device --lifetime --owner-pid --init --from --json -q $common" ;;
    mcd-get) opts="--no-ref -o --print --json -q $common" ;;
    mcd-rm) opts="--ignore-missing --json -q $common" ;;
    mcd-ls) opts="-l -q --no-headers --json $common" ;;
    mcd-serve) opts="--spawn-redis --redis-server --devices --allocator --pool-max --pool-release-threshold --pool-group --pool-socket --ready-max --heartbeat-ttl --req-ttl -q -v $common" ;;
  esac
  if [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
  elif [[ "$cmd" == mcd-get || "$cmd" == mcd-rm ]]; then
    COMPREPLY=($(compgen -W "$(_mcd_tensor_names)" -- "$cur"))
  fi
}
complete -F _mcd_complete mcd-create mcd-get mcd-rm mcd-ls mcd-serve
