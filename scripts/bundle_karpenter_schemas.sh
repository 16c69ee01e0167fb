#!/usr/bin/env bash
# Bundle Karpenter's published validators into the Python package, at build time.
#
# `spotproof plan` checks NodePools and EC2NodeClasses against the schemas that the npm
# package @kubernetes-models/karpenter publishes (pinned in package-lock.json). In a
# checkout they are read from node_modules; a wheel carries them instead, as one
# self-contained ES module built here with esbuild, so a pip-installed spotproof needs
# Node.js to run them but never `npm install`. The bundle is a build output (ignored by
# git), written to components/spotproof/plan/schemas/karpenter_schemas/.
set -euo pipefail
cd "$(dirname "$0")/.."

out=components/spotproof/plan/schemas/karpenter_schemas
package=node_modules/@kubernetes-models/karpenter
[ -f "$package/package.json" ] || { echo "run 'npm ci' first: $package is missing" >&2; exit 2; }

mkdir -p build "$out"
entry=build/karpenter-validators.mjs
# The names karpenter_schema.mjs looks validators up by: apiVersion/kind.
cat > "$entry" <<'JS'
export { validate as NodePool } from "../node_modules/@kubernetes-models/karpenter/_schemas/IoK8sSigsKarpenterPkgApisV1NodePool.js";
export { validate as EC2NodeClass } from "../node_modules/@kubernetes-models/karpenter/_schemas/ComGithubAwsKarpenterProviderAwsPkgApisV1EC2NodeClass.js";
JS
# Some dependencies are CommonJS and require Node built-ins (punycode); an ES module bundle
# has no `require` of its own, so the banner gives it Node's.
node_modules/.bin/esbuild "$entry" --bundle --format=esm --platform=node --target=node20 \
  --minify --legal-comments=eof --log-level=warning --outfile="$out/validators.mjs" \
  --banner:js='import { createRequire } from "node:module"; const require = createRequire(import.meta.url);'
rm -f "$entry"
cp "$package/LICENSE" "$out/LICENSE"
node -e 'const p = require(process.argv[1]); console.log(`${p.name} ${p.version}`)' \
  "$PWD/$package/package.json" > "$out/SOURCE"
echo "bundled $(cat "$out/SOURCE") into $out/validators.mjs ($(wc -c < "$out/validators.mjs") bytes)"
