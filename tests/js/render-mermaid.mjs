// Draws a Mermaid diagram (a file) in headless Chromium, offline, and saves a screenshot: what GitHub shows.
// Prints {"error": null | message, "svg": true | false}.
import { chromium } from 'playwright-core';
import fs from 'fs';
import path from 'path';
import { fileURLToPath } from 'url';

const [, , input, output] = process.argv;
const here = path.dirname(fileURLToPath(import.meta.url));
const lib = path.join(here, 'node_modules', 'mermaid', 'dist', 'mermaid.min.js');
const escape = (s) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;');
const page = path.join(path.dirname(output), 'mermaid-page.html');
fs.writeFileSync(page, `<!doctype html><html><body><pre class="mermaid">${escape(fs.readFileSync(input, 'utf8'))}</pre>
<script src="file://${lib}"></script><script>mermaid.initialize({startOnLoad: false});
mermaid.run().then(() => { document.body.dataset.done = 'ok'; }).catch((e) => { document.body.dataset.done = 'error: ' + e.message; });
</script></body></html>`);
const browser = await chromium.launch({ executablePath: process.env.ORBENCH_CHROMIUM || '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
         '--disable-sync', '--no-first-run'] });
try {
  const tab = await browser.newPage({ viewport: { width: 760, height: 620 } });
  await tab.goto('file://' + page);
  await tab.waitForFunction(() => document.body.dataset.done, null, { timeout: 30000 });
  const done = await tab.evaluate(() => document.body.dataset.done);
  const svg = await tab.evaluate(() => Boolean(document.querySelector('pre.mermaid svg')));
  await tab.screenshot({ path: output });
  process.stdout.write(JSON.stringify({ error: done === 'ok' ? null : done, svg }));
} finally {
  await browser.close();
}
