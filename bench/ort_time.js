// bench/ort_time.js - times ONNX Runtime's CPU inference of one ONNX file,
// for bench/run-vs-ort.sh. onnxruntime-node ships libonnxruntime.so in its
// package; NODE_PATH points at the node_modules holding it.
//   node bench/ort_time.js MODEL.onnx THREADS RUNS WARMUP INPUTS.json
// INPUTS.json: [{"name", "dims", "type": "float32"|"int64", "bound"}]: float
// inputs uniform in [-1, 1), integers uniform in [0, bound), seeded.
// Prints one JSON line: {"median_seconds", "runs", "threads"}.
const ort = require('onnxruntime-node');
const fs = require('fs');

async function main() {
  const [model, threads, runs, warmup, inputsFile] = process.argv.slice(2);
  const specs = JSON.parse(fs.readFileSync(inputsFile, 'utf8'));
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: Number(threads),
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  });
  let seed = 12345;
  const next = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
  const feeds = {};
  for (const s of specs) {
    const n = s.dims.reduce((a, b) => a * b, 1);
    if (s.type === 'int64') {
      const data = new BigInt64Array(n);
      for (let i = 0; i < n; ++i) data[i] = BigInt(Math.floor(next() * s.bound));
      feeds[s.name] = new ort.Tensor('int64', data, s.dims);
    } else {
      const data = new Float32Array(n);
      for (let i = 0; i < n; ++i) data[i] = 2 * next() - 1;
      feeds[s.name] = new ort.Tensor('float32', data, s.dims);
    }
  }
  for (let i = 0; i < Number(warmup); ++i) await session.run(feeds);
  const times = [];
  for (let i = 0; i < Number(runs); ++i) {
    const t0 = process.hrtime.bigint();
    await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - t0) / 1e9);
  }
  times.sort((a, b) => a - b);
  const mid = times.length >> 1;
  const median = times.length % 2 ? times[mid] : (times[mid - 1] + times[mid]) / 2;
  console.log(JSON.stringify({median_seconds: median, runs: times.length, threads: Number(threads)}));
}

main().catch((e) => {
  console.error('ort_time: ' + (e && e.message ? e.message : e));
  process.exit(1);
});
