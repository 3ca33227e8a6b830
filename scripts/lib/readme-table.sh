# readme_table NAME BEGIN END TABLE CHECK: puts the lines of file TABLE between README.md's lines BEGIN and END
# (CHECK 0), or (CHECK 1) fails, showing the difference and saying to run scripts/NAME.sh, when README.md's lines
# there differ. For the README's generated tables (scripts/coverage-table.sh, scripts/framework-table.sh), sourced
# from the repository's root.
readme_table() {
  local name=$1 begin=$2 end=$3 table=$4 check=$5 updated
  updated=$(mktemp)
  awk -v begin="$begin" -v end="$end" -v table="$table" '
    $0 == begin { print; while ((getline line < table) > 0) print line; skipping = 1; next }
    $0 == end { skipping = 0 }
    !skipping { print }
  ' README.md >"$updated"
  if ((check)); then
    if ! diff -u README.md "$updated"; then
      rm -f "$updated"
      echo "$name: README.md's table is stale: run scripts/$name.sh" >&2
      return 1
    fi
    echo "$name: README.md's table is current"
  else
    cp "$updated" README.md
    echo "$name: README.md updated"
  fi
  rm -f "$updated"
}
