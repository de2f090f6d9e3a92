// Bundles the Health tab into the Python package: ../tb_health_plugin/static/index.{js,css}.
// One ES module (TensorBoard imports it and calls render()) and one stylesheet; no inline script.
// Run through `npm run build`/`bundle`, which first generate src/generated/contract.ts from the
// backend's contract with python3 (scripts/generate_contract.py): the bundle imports it.
import {build} from 'esbuild';
import {fileURLToPath} from 'node:url';
import path from 'node:path';

const here = path.dirname(fileURLToPath(import.meta.url));
const outdir = path.resolve(here, '../tb_health_plugin/static');

await build({
  entryPoints: {index: path.join(here, 'src/index.ts')},
  bundle: true,
  format: 'esm',
  target: ['es2020'],
  minify: process.env.TB_HEALTH_DEV !== '1',
  sourcemap: false,
  outdir,
  logLevel: 'info',
});
