// Starts s3rver from the npm package directory given first, with the rest
// of the arguments as its command line (the package ships lib/cli.js, not
// its bin script). tests/http/test_s3.sh runs it; it prints
// "S3rver listening on ADDRESS:PORT" once the port is bound.
const dir = process.argv[2];
require(dir + '/lib/cli.js').parseAsync(['node', 's3rver'].concat(process.argv.slice(3)));
