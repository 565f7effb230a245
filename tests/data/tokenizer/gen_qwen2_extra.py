import random
random.seed(7)
hard = [
 "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
 "<|endoftext|>", "a<|endoftext|>b", " <|im_end|> ", "<|im_start|><|im_end|>", "<|im_start", "<|fim_prefix|>x<|fim_suffix|>",
 "<think>\nok\n</think>\n\n", "[PAD151646]x", "[PAD151935][PAD151646]", "<tool_call>{}</tool_call>",
 "I'M YOU'RE we'LL they'Ve it'D he'S can'T", "'s 's's ''s", "\u017f'\u017f's",
 "\r\n\r\n", "a\r\nb", "\n\n\n  \n\t", "   leading", "trailing   ", " \u00a0 \u3000x", "\u2028\u2029",
 "\u200b\u200d", "👨‍👩‍👧‍👦 family", "🇫🇷🇯🇵", "👍🏽!!", "e\u0301 cafe\u0301", "नमस्ते दुनिया", "مرحبا بالعالم", "Привет, мир!",
 "中文測試，標點。", "日本語のテキスト", "한국어 텍스트", "x\u180ey!", "1234567890", "3.14159 1e-5 0x1F", "½ ² ① Ⅻ",
 "def f(x):\n    return x**2  # comment\n", "if (a && b) { return; }", "<html><body>Hi</body></html>",
 "\t\tindented\ttabs", "a" * 300, " " * 100 + "x", "!" * 50, "\x00\x01\x1f\x7f", "\u0085next line",
 "Ω≈ç√∫˜µ≤≥÷", "😀😃😄 😁", "ZWJ\u200dtest", "🤖 <|im_end|> 🤖", "@#$%^&*()_+-=[]{}|;':\",./<>?`~",
 "ſ ß ẞ ﬁ", "tab\there", "mixed\r\n\n\r", "a'S b'ReX", "don't", "DON'T", "  '  ", "\U00031350\U0002EBF0 new CJK",
]
chars = list("abcXYZ  \n\t\r'019.,!?<>|_") + ["\u00a0","\u3000","é","中","😀","\u0301","ſ","\u200d","\u2029","'s","'LL","<|im_end|>","<|endoftext|>","[PAD151700]","<|im_start|>", "ü", "Я", "🇫", "\U0001F3FD"]
for i in range(150):
    n = random.randint(1, 25)
    hard.append("".join(random.choice(chars) for _ in range(n)))
sep = "\n__ggml_vocab_test__\n"
open("hard.inp","w",encoding="utf-8",newline="").write("".join(s+sep for s in hard))
print(len(hard))
