#!/usr/bin/env bash
# Rebuild .dvc/plots_html/offline.html: DVC's HTML page for `dvc plots show` / `dvc plots diff`
# with vega, vega-lite and vega-embed inlined, so the interactive plots render without network
# (DVC's default page loads them from a CDN; offline every plot is blank). .dvc/config points
# `plots.html_template` at it. The versions are the ones dvc_render's page pins
# (dvc_render/vega.py); run this after a DVC upgrade changes them. Needs npm (registry access).
set -euo pipefail
cd "$(dirname "$0")/.."
VERSIONS=(vega@5.20.2 vega-lite@5.2.0 vega-embed@6.18.2)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "${VERSIONS[@]}" >/dev/null && for t in *.tgz; do mkdir "${t%.tgz}" && tar -xzf "$t" -C "${t%.tgz}"; done)
out=.dvc/plots_html/offline.html
mkdir -p "$(dirname "$out")"
{
  echo '<!DOCTYPE html>'
  echo '<html>'
  echo '<head>'
  echo '    {refresh_tag}'
  echo '    <meta charset="utf-8">'
  echo '    <title>DVC Plot (offline)</title>'
  echo "    <!-- ${VERSIONS[*]} inlined (BSD-3-Clause, (c) the Vega project) by scripts/build_offline_plots_template.sh -->"
  for f in vega-5.20.2/package/build/vega.min.js vega-lite-5.2.0/package/build/vega-lite.min.js \
           vega-embed-6.18.2/package/build/vega-embed.min.js; do
    printf '    <script type="text/javascript">\n'
    sed -e 's#//\# sourceMappingURL=.*##' "$tmp/$f"
    printf '\n    </script>\n'
  done
  echo '    <style>table { border-spacing: 15px; }</style>'
  echo '</head>'
  echo '<body>'
  echo '    {plot_divs}'
  echo '</body>'
  echo '</html>'
} > "$out"
grep -c '{plot_divs}' "$out" >/dev/null
echo "wrote $out ($(wc -c < "$out") bytes)"
