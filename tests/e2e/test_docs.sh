#!/usr/bin/env bash
# The docs show files as they are: every ```yaml block that follows a line
# "`PATH`:" or "with `PATH`:" in docs/*.md must equal the file PATH of the
# repository.
. "$(dirname "$0")/lib.sh"
cd "$SRC"
for doc in docs/*.md README.md; do
  while IFS= read -r path; do
    got=$(awk -v p="\`$path\`:" 'index($0, p) && !f {f=1; next} f==1 && /^```yaml$/ {f=2; next} f==2 && /^```$/ {exit} f==2 {print}' "$doc")
    if [ "$got" = "$(cat "$path")" ]; then ok "$doc shows $path as it is"
    else not_ok "$doc shows an outdated $path"; diff <(printf '%s\n' "$got") "$path" | head -10 | sed 's/^/    /'; fi
  done < <(grep -oE '`[a-z_/]+\.yaml`:$' "$doc" | tr -d '`:' | sort -u | while read -r p; do [ -f "$p" ] && echo "$p"; done)
done
finish
