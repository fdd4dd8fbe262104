// `npm run model`: copies weft's bundled demo model (models/kjv-target of the weft repository, a
// small base model trained from scratch on the King James Bible, 11 MB) into public/, which Vite serves at
// /models/kjv-target/ and copies into the build. Another folder to copy may be given as an argument.
import { cp } from 'node:fs/promises';

const from = process.argv[2] ?? new URL('../../models/kjv-target/', import.meta.url);
await cp(from, new URL('./public/models/kjv-target/', import.meta.url), { recursive: true });
console.log('copied the model into public/models/kjv-target/');
