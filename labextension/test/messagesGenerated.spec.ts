/**
 * src/messages.generated.ts is what scripts/messages.mjs makes of contracts.json today. The
 * script runs in its own Node process: json-schema-to-typescript and Prettier load ES
 * modules, which jest's CommonJS sandbox cannot.
 */
import { execFileSync } from 'child_process';
import { readFileSync } from 'fs';
import { join } from 'path';

const ROOT = join(__dirname, '..');

describe('messages.generated.ts', () => {
  it("holds the types of contracts.json's comm schema", () => {
    const generated = execFileSync(
      process.execPath,
      [join(ROOT, 'scripts', 'messages.mjs'), '--stdout'],
      { encoding: 'utf8' }
    );
    const committed = readFileSync(
      join(ROOT, 'src', 'messages.generated.ts'),
      'utf8'
    );
    if (generated !== committed) {
      throw new Error(
        "src/messages.generated.ts is stale: it is not what contracts.json's comm schema " +
          'generates. Run `jlpm run generate:messages` and commit the result.'
      );
    }
  });
});
