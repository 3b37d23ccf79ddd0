// Generates TypeScript types for the whole API from a running privclust's /openapi.json:
//   node generate.mjs <base URL or file of the OpenAPI document> <output .ts file>
// openapi-typescript turns every path, parameter, body and response into types; openapi-fetch
// (src/walkthrough.ts) is then a typed client of them. File parts (`format: binary`) become
// Blob, which is what a browser's or Node's FormData takes.
import { writeFileSync } from "node:fs";
import openapiTS, { astToString } from "openapi-typescript";
import ts from "typescript";

const [source, output] = process.argv.slice(2);
if (!source || !output) {
  console.error("usage: node generate.mjs <openapi.json URL or path> <output.ts>");
  process.exit(2);
}
const BLOB = ts.factory.createTypeReferenceNode(ts.factory.createIdentifier("Blob"));
const ast = await openapiTS(new URL(source, `file://${process.cwd()}/`), {
  // A field with a default is optional in a request (the server fills it in); by default the
  // generator would make it required, as if every schema described a response.
  defaultNonNullable: false,
  transform(schema) {
    if (schema.format === "binary") return BLOB;
    return undefined;
  },
});
writeFileSync(output, astToString(ast));
console.log(`wrote ${output}`);
