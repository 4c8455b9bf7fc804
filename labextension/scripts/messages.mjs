/**
 * Writes src/messages.generated.ts: the TypeScript types of the ranks panel's comm messages,
 * generated with json-schema-to-typescript from the `comm.schema` definitions of
 * jupyter_distcomp/contracts.json, the schema the kernel checks its side with.
 *
 *   node scripts/messages.mjs           writes the file (jlpm run generate:messages)
 *   node scripts/messages.mjs --stdout  prints it instead (test/messagesGenerated.spec.ts
 *                                       compares that with the committed file)
 */
import { readFile, writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';

import { compile } from 'json-schema-to-typescript';
import prettier from 'prettier';

const CONTRACTS = fileURLToPath(
  new URL('../../jupyter_distcomp/contracts.json', import.meta.url)
);
const TARGET = fileURLToPath(
  new URL('../src/messages.generated.ts', import.meta.url)
);

const BANNER = `/**
 * The messages of the ranks panel's comm, each way: generated from the \`comm.schema\`
 * definitions of jupyter_distcomp/contracts.json by scripts/messages.mjs. Do not edit;
 * change contracts.json, then run \`jlpm run generate:messages\`.
 */`;

/** The generated module's source, formatted with the project's Prettier settings. */
export async function messagesSource() {
  const contracts = JSON.parse(await readFile(CONTRACTS, 'utf8'));
  const { definitions } = contracts.comm.schema;
  // Each definition's type takes its name; objects become interfaces, named I... as the
  // project's (and JupyterLab's) naming convention wants.
  const named = Object.fromEntries(
    Object.entries(definitions).map(([name, definition]) => [
      name,
      { ...definition, title: definition.type === 'object' ? `I${name}` : name }
    ])
  );
  // The root is every message either way; the definitions it does not reach get a type too.
  const root = {
    description: 'Anything either side sends over the comm.',
    definitions: named,
    oneOf: [
      { $ref: '#/definitions/KernelMessage' },
      { $ref: '#/definitions/RankRequest' }
    ]
  };
  const source = await compile(root, 'CommMessage', {
    bannerComment: BANNER,
    unreachableDefinitions: true,
    format: false
  });
  const options = await prettier.resolveConfig(TARGET);
  return prettier.format(source, { ...options, filepath: TARGET });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const source = await messagesSource();
  if (process.argv.includes('--stdout')) {
    process.stdout.write(source);
  } else {
    await writeFile(TARGET, source);
  }
}
