#!/usr/bin/env bash
# Download the public 20news-bydate archive (for machines without ../shared/data).
set -euo pipefail
case "${1:-}" in -h | --help) sed -n '2,/^set -/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;; esac  # the header above, no work
dest=${1:-out/20news-bydate.tar.gz}
mkdir -p "$(dirname "$dest")"
curl -fL --retry 3 -o "$dest.part" http://qwone.com/~jason/20Newsgroups/20news-bydate.tar.gz
echo "cd30ce3849a24bf72cce256b7bf150fd9a2c5282018a13848a71f8b9f74b4932  $dest.part" | sha256sum -c -
mv "$dest.part" "$dest"
