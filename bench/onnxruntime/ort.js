// onnxruntime-node on one thread: the median of N runs after a warm-up, per model, on the
// input export_models.py wrote, and the first output's values. Usage: node ort.js ONNXRUNTIME_NODE_DIR INPUT.f32 N MODEL...
const [ortDir, inputPath, runs, ...models] = process.argv.slice(2);
const ort = require(ortDir);
const fs = require('fs');
(async () => {
  const bytes = fs.readFileSync(inputPath);
  const data = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4);
  for (const model of models) {
    const session = await ort.InferenceSession.create(
        model, {intraOpNumThreads: 1, interOpNumThreads: 1, graphOptimizationLevel: 'all'});
    const feeds = {[session.inputNames[0]]: new ort.Tensor('float32', data, [1, 3, 224, 224])};
    await session.run(feeds);
    const times = [];
    for (let i = 0; i < Number(runs); ++i) {
      const start = process.hrtime.bigint();
      await session.run(feeds);
      times.push(Number(process.hrtime.bigint() - start) / 1e9);
    }
    times.sort((a, b) => a - b);
    // The first output, for the comparison of values.
    const output = (await session.run(feeds))[session.outputNames[0]].data;
    console.log(JSON.stringify(
        {model, median_s: times[Math.floor(times.length / 2)], output: Array.from(output)}));
  }
})();
