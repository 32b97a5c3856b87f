// Starts fauxqs's S3 (npm fauxqs 1.9.2, the last release that runs on
// Node 20) from the package directory given first, on 127.0.0.1 (its own
// startFauxqs binds every interface) and an ephemeral port, with the bucket
// given second; its body limit stays as it ships (11 MiB). Prints
// "fauxqs listening on 127.0.0.1:PORT" once the port is bound.
// usage: node tests/http/s3/run_fauxqs.mjs DIR BUCKET
const dir = process.argv[2], bucket = process.argv[3];
const { buildApp } = await import(dir + '/dist/app.js');
const { SqsStore } = await import(dir + '/dist/sqs/sqsStore.js');
const { SnsStore } = await import(dir + '/dist/sns/snsStore.js');
const { S3Store } = await import(dir + '/dist/s3/s3Store.js');
const s3Store = new S3Store();
const app = buildApp({ logger: false, stores: { sqsStore: new SqsStore(), snsStore: new SnsStore(), s3Store } });
s3Store.createBucket(bucket);
const address = await app.listen({ port: 0, host: '127.0.0.1' });
console.log('fauxqs listening on 127.0.0.1:' + new URL(address).port);
