// Mermaid's own parser on diagrams given as a JSON list on stdin: prints a JSON list, null for each that
// parses, else the parser's error. Mermaid needs a DOM for its sanitiser: jsdom stands in for the browser.
import { JSDOM } from 'jsdom';

const dom = new JSDOM('<!doctype html><html><body></body></html>');
globalThis.window = dom.window;
globalThis.document = dom.window.document;
const { default: mermaid } = await import('mermaid');

let input = '';
for await (const chunk of process.stdin) input += chunk;
const results = [];
for (const text of JSON.parse(input)) {
  try {
    await mermaid.parse(text);
    results.push(null);
  } catch (error) {
    results.push(String(error && error.message ? error.message : error));
  }
}
process.stdout.write(JSON.stringify(results));
