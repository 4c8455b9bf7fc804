/**
 * "Did you mean ...?" for misspelt names, the same rule as errors.closest() on the Python
 * side (difflib ratio >= 0.6, case-insensitive), so the editor and the kernel suggest alike.
 */

/** Ratcliff/Obershelp similarity as computed by Python's difflib.SequenceMatcher.ratio(). */
export function similarity(a: string, b: string): number {
  if (!a.length && !b.length) {
    return 1;
  }
  return (2 * matchingCharacters(a, b)) / (a.length + b.length);
}

function matchingCharacters(a: string, b: string): number {
  if (!a.length || !b.length) {
    return 0;
  }
  let bestLength = 0;
  let bestA = 0;
  let bestB = 0;
  for (let i = 0; i < a.length; i++) {
    for (let j = 0; j < b.length; j++) {
      let k = 0;
      while (i + k < a.length && j + k < b.length && a[i + k] === b[j + k]) {
        k++;
      }
      if (k > bestLength) {
        bestLength = k;
        bestA = i;
        bestB = j;
      }
    }
  }
  if (bestLength === 0) {
    return 0;
  }
  return (
    bestLength +
    matchingCharacters(a.slice(0, bestA), b.slice(0, bestB)) +
    matchingCharacters(a.slice(bestA + bestLength), b.slice(bestB + bestLength))
  );
}

/** The closest valid name to `name`, or null when nothing is close enough. */
export function closest(
  name: string,
  choices: Iterable<string>,
  cutoff = 0.6
): string | null {
  let best: string | null = null;
  let bestScore = cutoff;
  for (const choice of choices) {
    if (choice.toLowerCase() === name.toLowerCase()) {
      return choice;
    }
    const score = similarity(name.toLowerCase(), choice.toLowerCase());
    if (score >= bestScore && (best === null || score > bestScore)) {
      best = choice;
      bestScore = score;
    }
  }
  return best;
}

/** " Did you mean 'x'?" or an empty string. */
export function didYouMean(name: string, choices: Iterable<string>): string {
  const best = closest(name, choices);
  return best ? ` Did you mean '${best}'?` : '';
}
