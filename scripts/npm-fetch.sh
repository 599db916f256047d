# Sourced by the fixture scripts (bullseye-rootfs.sh, other-nodes.sh):
#   fetch_npm <spec> <integrity> <dir>
# packs the npm package <spec> (pinned by version) into <dir>, checks it
# against <integrity> as written in the script (npm pack checks the
# registry's own too), and prints the tarball's path. Exits on a mismatch.
fetch_npm() {
  local spec="$1" integrity="$2" out="$3"
  local file
  file="$(cd "$out" && npm pack "$spec" --silent --ignore-scripts)"
  local got
  got="$(node -e 'process.stdout.write("sha512-" + require("crypto").createHash("sha512").update(require("fs").readFileSync(process.argv[1])).digest("base64"))' "$out/$file")"
  if [[ "$got" != "$integrity" ]]; then
    echo "$spec: integrity $got, expected $integrity" >&2
    exit 1
  fi
  echo "$out/$file"
}
