// Loads a page in headless Chromium, offline, and plays the steps given as JSON on stdin:
//   {"select": [css, value]}, {"fill": [css, text]}, {"click": css}, {"rows": css}, {"text": css},
//   {"download": css} (clicks and returns the downloaded file's text), {"eval": "expression"}
// Prints {"results": [...one per step...], "errors": [...], "requests": [...non-file requests...],
//         "ms": load time}. Nothing leaves the machine: every non-file request is aborted and listed.
import { chromium } from 'playwright-core';
import fs from 'fs';

const [, , file] = process.argv;
let input = '';
for await (const chunk of process.stdin) input += chunk;
const steps = JSON.parse(input || '[]');
const browser = await chromium.launch({ executablePath: process.env.ORBENCH_CHROMIUM || '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
         '--disable-sync', '--no-first-run'] });
const out = { results: [], errors: [], requests: [], ms: 0 };
try {
  const context = await browser.newContext({ acceptDownloads: true, viewport: { width: 1400, height: 1000 } });
  await context.route('**/*', (route) => {
    const url = route.request().url();
    if (url.startsWith('file:') || url.startsWith('data:') || url.startsWith('blob:')) return route.continue();
    out.requests.push(url);
    return route.abort();
  });
  const page = await context.newPage();
  page.on('console', (m) => { if (m.type() === 'error') out.errors.push(m.text()); });
  page.on('pageerror', (e) => out.errors.push(String(e)));
  const started = Date.now();
  await page.goto('file://' + file);
  await page.waitForFunction(() => document.body.dataset.ready === '1', null, { timeout: 60000 });
  out.ms = Date.now() - started;
  for (const step of steps) {
    if (step.select) { await page.selectOption(step.select[0], step.select[1]); out.results.push(null); }
    else if (step.fill) { await page.fill(step.fill[0], step.fill[1]); out.results.push(null); }
    else if (step.click) { await page.click(step.click); out.results.push(null); }
    else if (step.rows) { out.results.push(await page.$$eval(step.rows, (r) => r.length)); }
    else if (step.text) { out.results.push(await page.$$eval(step.text, (e) => e.map((x) => x.textContent))); }
    else if (step.eval) { out.results.push(await page.evaluate(step.eval)); }
    else if (step.download) {
      const [download] = await Promise.all([page.waitForEvent('download'), page.click(step.download)]);
      const path = await download.path();
      out.results.push(fs.readFileSync(path, 'utf8'));
    }
  }
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(out));
