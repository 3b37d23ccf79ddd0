// Generates TypeScript types for the whole API from a running privclust's /openapi.json:
//   node generate.mjs <base URL or file of the OpenAPI document> <output .ts file>
// openapi-typescript, with its default options, turns every path, parameter, body and response
// into types; openapi-fetch (src/walkthrough.ts) is then a typed client of them. The document
// itself makes the types fit a client: a request field with a default is optional (its default
// is stated in words), and the upload's file part is bytes of any type (a Blob is taken).
import { writeFileSync } from "node:fs";
import openapiTS, { astToString } from "openapi-typescript";

const [source, output] = process.argv.slice(2);
if (!source || !output) {
  console.error("usage: node generate.mjs <openapi.json URL or path> <output.ts>");
  process.exit(2);
}
const ast = await openapiTS(new URL(source, `file://${process.cwd()}/`));
writeFileSync(output, astToString(ast));
console.log(`wrote ${output}`);
