// What run() keeps of a long output: maxBuffer with keep head, tail, both,
// the marker, encoding 'buffer', all (stdout and stderr merged), onOutput,
// and a character that straddles the limit left out whole.
import { load, scenario } from './_lib.mjs';

scenario('output', async (t) => {
  const { run } = load();
  const full = Array.from({ length: 1000 }, (_, i) => `${i + 1}\n`).join('');
  const total = full.length;
  const seq = ['sh', ['-c', 'seq 1 1000; echo err >&2']];

  const head = await run(...seq, { maxBuffer: 50 });
  t.check(head.stdout === full.slice(0, 50) && head.stdoutTruncated && head.stdoutOmitted === total - 50, "keep: 'head' (default)", head.stdout);
  t.check(head.stderr === 'err\n' && head.stderrOmitted === 0, 'stderr under the limit', head.stderr);

  const tail = await run(...seq, { maxBuffer: 50, keep: 'tail' });
  t.check(tail.stdout === full.slice(total - 50) && tail.stdoutOmitted === total - 50, "keep: 'tail'", tail.stdout);

  const both = await run(...seq, { maxBuffer: 50, keep: 'both', marker: true });
  const omitted = total - 50;
  t.check(both.stdout === `${full.slice(0, 25)}\n[... ${omitted} bytes omitted ...]\n${full.slice(total - 25)}`, "keep: 'both' with the marker", both.stdout);

  const buf = await run(...seq, { maxBuffer: 100, keep: 'tail', encoding: 'buffer', marker: '<{omitted} cut>' });
  t.check(Buffer.isBuffer(buf.stdout) && buf.stdout.equals(Buffer.from(`<${total - 100} cut>${full.slice(total - 100)}`)), "encoding: 'buffer', a custom marker", `${buf.stdout}`);

  const utf = await run('printf', ['é€😀'], { maxBuffer: 6 });
  t.check(utf.stdout === 'é€' && utf.stdoutOmitted === 4, 'a character is never cut', [utf.stdout, utf.stdoutOmitted]);

  const chunks = { stdout: 0, stderr: 0 };
  const all = await run('sh', ['-c', 'echo one; echo two >&2; echo three'], { all: true, onOutput: (c, s) => (chunks[s] += c.length) });
  t.check(all.all.split('\n').sort().join() === ',one,three,two' && all.stdout === 'one\nthree\n', 'all: both streams merged', all.all);
  t.check(chunks.stdout === 10 && chunks.stderr === 4, 'onOutput saw every byte', chunks);

  const big = await run('sh', ['-c', 'head -c 3000000 /dev/zero']);
  t.check(big.stdout.length === 3000000 && big.stdoutOmitted === 0, 'a 3 MB output whole', big.stdout.length);
});
