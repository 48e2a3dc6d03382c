// Bundles the page into dist/: index.html, app.js (src/main.ts and livekit-client), style.css.
import { copyFile, mkdir, rm } from 'node:fs/promises';
import { build } from 'esbuild';

const dist = new URL('./dist/', import.meta.url);
await rm(dist, { recursive: true, force: true });
await mkdir(dist, { recursive: true });
await build({
  entryPoints: ['src/main.ts'],
  outfile: 'dist/app.js',
  bundle: true,
  format: 'iife',
  target: ['es2020', 'safari15'],
  minify: true,
  sourcemap: true,
  logLevel: 'info',
});
await copyFile(new URL('./index.html', import.meta.url), new URL('index.html', dist));
await copyFile(new URL('./src/style.css', import.meta.url), new URL('style.css', dist));
