"""Tokenisation: CJK splitting, Unicode NFKC, old models' settings, small-corpus errors.

The Chinese and Japanese corpora below (four topics in a two-level taxonomy)
are also the measurement corpus of docs/TOKENIZATION.md:
``python tests/test_tokenize.py`` prints its accuracy table.
"""

import glob
import json
import os
from dataclasses import asdict, replace

import pytest
from chispa import assert_df_equality
from pyspark.ml.feature import RegexTokenizer, StopWordsRemover
from saved_outputs import drop_manifest

from pcem_spark.engine.features import (
    DEFAULT_TOKEN_PATTERN,
    FeatureSettings,
    count_vectorizer_model,
    featurize,
    fit_vocabulary,
    nfkc,
    nfkc_python,
    tokenize,
)

# --------------------------------------------------------------------------- corpora
TAXONOMY = {"ROOT": ["生活", "商业"], "生活": ["体育", "美食"], "商业": ["科技", "财经"]}
PARENT = {"体育": "生活", "美食": "生活", "科技": "商业", "财经": "商业"}

CHINESE = {
    "体育": [
        "昨晚的足球比赛中，主队在最后一分钟打进了制胜球。",
        "这名篮球运动员本赛季场均得分超过三十分。",
        "国家队主教练公布了参加世界杯预选赛的球员名单。",
        "马拉松比赛吸引了两万多名跑者参加。",
        "她在游泳比赛中打破了亚洲纪录，获得金牌。",
        "球队的前锋因为膝盖受伤将缺席下一场比赛。",
        "乒乓球男单决赛非常激烈，比分一直交替领先。",
        "奥运会开幕式上，运动员们入场时观众热烈欢呼。",
        "这支足球俱乐部花重金签下了一名年轻的中场球员。",
        "网球公开赛的冠军在颁奖仪式上感谢了教练和家人。",
        "篮球联赛季后赛第一轮，客队以十分优势获胜。",
        "裁判的一次争议判罚引起了球迷的强烈不满。",
        "田径运动员在一百米决赛中跑出了个人最好成绩。",
        "主场球迷为球队的连胜纪录唱歌庆祝。",
        "羽毛球混双组合顺利晋级半决赛。",
        "教练认为球队的防守还需要加强训练。",
        "这位老将宣布赛季结束后退役，结束二十年的职业生涯。",
        "排球女队在比赛中连赢三局，夺得冠军。",
        "体育馆里座无虚席，观众为运动员加油。",
        "守门员扑出点球，帮助球队进入决赛。",
    ],
    "美食": [
        "这家餐厅的红烧肉肥而不腻，味道非常好。",
        "做饺子的时候，馅里可以加一点白菜和猪肉。",
        "四川火锅以麻辣著称，很多人喜欢配上冰啤酒。",
        "妈妈每天早上给我们做豆浆和油条。",
        "这道菜需要先用大火炒，再加入酱油和糖。",
        "广东人喜欢喝早茶，点心有虾饺和烧卖。",
        "北京烤鸭的皮要烤得又香又脆。",
        "新开的面馆牛肉面汤头浓郁，面条很有嚼劲。",
        "做蛋糕需要面粉、鸡蛋、牛奶和黄油。",
        "夏天吃一碗凉面，再配上一杯绿豆汤，特别舒服。",
        "这家小吃店的煎饼果子每天早上都排长队。",
        "厨师建议炖汤时用小火慢慢煮两个小时。",
        "上海的小笼包皮薄汤多，要小心烫嘴。",
        "我们在夜市吃了烤串、臭豆腐和糖葫芦。",
        "米饭煮好以后，加入鸡蛋和葱花就能做成炒饭。",
        "这道鱼清蒸最好，只放姜丝和葱段就很鲜美。",
        "餐厅的服务员推荐了几道招牌菜和甜点。",
        "中秋节的时候，家家户户都要吃月饼。",
        "他学会了用新鲜的番茄和鸡蛋做一道家常菜。",
        "这碗汤加了太多盐，味道有点咸。",
    ],
    "科技": [
        "这款新手机采用了更大的屏幕和更快的芯片。",
        "公司发布了新一代人工智能模型，可以自动生成代码。",
        "软件更新修复了多个安全漏洞，建议用户尽快升级。",
        "半导体工厂正在建设新的芯片生产线。",
        "研究人员开发了一种新的电池技术，充电速度提高了一倍。",
        "这台电脑的内存和硬盘都可以升级。",
        "程序员在服务器上部署了新的数据库系统。",
        "云计算平台降低了中小企业的开发成本。",
        "新款笔记本电脑重量不到一公斤，续航时间超过十五个小时。",
        "网络安全专家提醒用户不要点击陌生链接。",
        "自动驾驶汽车需要大量的传感器和算法支持。",
        "这个应用程序的用户数量已经超过一亿。",
        "工程师正在测试新的无线网络设备。",
        "科学家利用量子计算机完成了复杂的计算任务。",
        "智能手表可以监测心率和睡眠质量。",
        "开源软件社区吸引了全世界的开发者参与。",
        "这家科技公司推出了新的操作系统。",
        "机器人在工厂里代替工人完成重复的工作。",
        "数据中心的服务器需要大量电力和冷却设备。",
        "手机芯片的制造工艺已经进入三纳米时代。",
    ],
    "财经": [
        "央行宣布下调存款准备金率，以支持经济增长。",
        "今天股市大幅上涨，银行股领涨。",
        "这家公司第三季度净利润同比增长百分之二十。",
        "投资者担心通货膨胀会导致利率继续上升。",
        "人民币对美元汇率近期保持稳定。",
        "基金经理建议分散投资，降低风险。",
        "房地产市场成交量下降，房价有所回落。",
        "上市公司发布年报，营业收入创历史新高。",
        "债券收益率上升，推动美元走强。",
        "政府出台减税政策，减轻企业负担。",
        "国际油价下跌，影响了能源公司的股价。",
        "银行提高了贷款利率，购房者的月供增加。",
        "这家企业计划在证券交易所上市融资。",
        "经济学家预测明年国内生产总值增速会放缓。",
        "保险公司推出新的理财产品，收益率较高。",
        "外汇储备规模连续三个月增加。",
        "股东大会通过了公司的分红方案。",
        "消费者物价指数同比上涨百分之二。",
        "投资银行调高了对这只股票的目标价格。",
        "财政部发行了新的国债，受到投资者欢迎。",
    ],
}

JAPANESE = {
    "体育": [
        "昨日のサッカーの試合で、日本代表が二対一で勝利した。",
        "野球の選手がホームランを打って、観客が大喜びした。",
        "マラソン大会には一万人以上のランナーが参加した。",
        "監督は次の試合に向けて守備の練習を強化すると話した。",
        "彼女は水泳の決勝で日本記録を更新し、金メダルを獲得した。",
        "テニスの選手が怪我のため大会を欠場することになった。",
        "オリンピックの開会式で選手たちが入場した。",
        "バスケットボールのチームは連勝記録を十に伸ばした。",
        "サッカーのゴールキーパーがペナルティキックを止めた。",
        "相撲の横綱が今場所で優勝した。",
        "球場はファンでいっぱいになり、応援の声が響いた。",
        "ベテラン選手が今シーズン限りで引退すると発表した。",
    ],
    "美食": [
        "このラーメン屋のスープは濃厚でとてもおいしい。",
        "母は毎朝みそ汁とご飯を作ってくれる。",
        "寿司屋でマグロとサーモンを注文した。",
        "カレーを作るときは、玉ねぎをよく炒めるのがコツだ。",
        "天ぷらは揚げたてを塩で食べるのがおすすめです。",
        "このレストランのデザートはチョコレートケーキが人気だ。",
        "夏は冷たいそばを食べると気持ちがいい。",
        "料理人は新鮮な魚を使って刺身を作った。",
        "お弁当には卵焼きと唐揚げが入っている。",
        "野菜をたっぷり入れた鍋料理は冬にぴったりだ。",
        "パンを焼くには小麦粉とバターと牛乳が必要です。",
        "この店のうどんは麺がもちもちしていて、だしもおいしい。",
    ],
    "科技": [
        "新しいスマートフォンは画面が大きく、カメラの性能も向上した。",
        "会社は人工知能を使った新しいサービスを発表した。",
        "ソフトウェアの更新でセキュリティの問題が修正された。",
        "半導体メーカーが新しい工場を建設している。",
        "このパソコンはメモリを増設することができる。",
        "エンジニアはサーバーに新しいデータベースを導入した。",
        "自動運転の車には多くのセンサーが搭載されている。",
        "クラウドサービスの利用者が急速に増えている。",
        "研究者は充電時間を半分にする電池を開発した。",
        "スマートウォッチで心拍数と睡眠を記録できる。",
        "ネットワークの障害でアプリが使えなくなった。",
        "プログラマーがオープンソースのソフトウェアを公開した。",
    ],
    "财经": [
        "日本銀行は金融緩和政策を続けると発表した。",
        "今日の株式市場では銀行株が大きく上昇した。",
        "円安が進み、輸出企業の利益が増えた。",
        "この会社の四半期の純利益は前年より二割増えた。",
        "投資家はインフレによる金利の上昇を心配している。",
        "政府は企業の税金を減らす政策を発表した。",
        "住宅ローンの金利が上がり、家を買う人が減った。",
        "原油価格の下落でエネルギー関連の株価が下がった。",
        "経済学者は来年の成長率が低下すると予測している。",
        "証券取引所に新しい企業が上場した。",
        "消費者物価指数は前年同月比で二パーセント上昇した。",
        "投資信託で資産を分散するのが大切だ。",
    ],
}

DOC_SCHEMA = "id string, text string, labels array<string>"


def corpus_rows(sentences, labeled_per_leaf, seed=0, all_labels=False):
    """(id, text, labels) rows: ``labeled_per_leaf`` random documents of each leaf keep their path."""
    import random

    rows = []
    rng = random.Random(seed)
    for leaf, texts in sentences.items():
        labeled = set(rng.sample(range(len(texts)), labeled_per_leaf))
        for i, text in enumerate(texts):
            path = [PARENT[leaf], leaf]
            rows.append((f"{leaf}-{i}", text, path if all_labels or i in labeled else None))
    return rows


def _tokens(spark, texts, settings):
    df = spark.createDataFrame([(i, t) for i, t in enumerate(texts)], "id int, text string")
    # Tokenising needs a decided list ("auto" is decided in training); these expectations use English, the old default.
    if settings.stop_words == "auto":
        settings = replace(settings, stop_words="english")
    return tokenize(df, settings).select("id", "tokens")


def _expected(spark, token_lists):
    return spark.createDataFrame(list(enumerate(token_lists)), "id int, tokens array<string>")


def _assert_tokens(spark, texts, settings, token_lists):
    assert_df_equality(
        _tokens(spark, texts, settings), _expected(spark, token_lists), ignore_nullable=True, ignore_row_order=True
    )


# --------------------------------------------------------------------------- CJK modes
ZH = ["我爱北京天安门。", "这款手机的芯片很快", "的", "iPhone手机和5G网络"]


def test_chinese_chars_one_token_per_character(spark):
    _assert_tokens(
        spark,
        ZH,
        FeatureSettings(cjk="chars"),
        [
            ["我", "爱", "北", "京", "天", "安", "门"],
            ["这", "款", "手", "机", "的", "芯", "片", "很", "快"],
            ["的"],
            ["iphone", "手", "机", "和", "5g", "网", "络"],
        ],
    )


def test_chinese_bigrams_overlap_within_each_run(spark):
    # A lone character stays a unigram; Latin and digits split off as their own tokens.
    _assert_tokens(
        spark,
        ZH,
        FeatureSettings(cjk="bigrams"),
        [
            ["我爱", "爱北", "北京", "京天", "天安", "安门"],
            ["这款", "款手", "手机", "机的", "的芯", "芯片", "片很", "很快"],
            ["的"],
            ["iphone", "手机", "机和", "5g", "网络"],
        ],
    )


def test_chinese_none_keeps_whole_runs_as_before(spark):
    _assert_tokens(
        spark,
        ZH,
        FeatureSettings(cjk="none"),
        [
            ["我爱北京天安门"],
            ["这款手机的芯片很快"],
            [],
            ["iphone手机和5g网络"],
        ],
    )


JA = ["コーヒーを飲む。", "東京タワー", "ｶﾀｶﾅ"]


def test_japanese_chars_and_bigrams(spark):
    _assert_tokens(
        spark,
        JA,
        FeatureSettings(cjk="chars"),
        [
            ["コ", "ー", "ヒ", "ー", "を", "飲", "む"],
            ["東", "京", "タ", "ワ", "ー"],
            ["カ", "タ", "カ", "ナ"],
        ],
    )
    # Halfwidth katakana are NFKC-normalised to fullwidth before splitting.
    _assert_tokens(
        spark,
        JA,
        FeatureSettings(cjk="bigrams"),
        [
            ["コー", "ーヒ", "ヒー", "ーを", "を飲", "飲む"],
            ["東京", "京タ", "タワ", "ワー"],
            ["カタ", "タカ", "カナ"],
        ],
    )
    _assert_tokens(spark, JA, FeatureSettings(cjk="none"), [["コーヒーを飲む"], ["東京タワー"], ["カタカナ"]])


def test_korean_hangul_is_split_too(spark):
    _assert_tokens(spark, ["한국어 텍스트"], FeatureSettings(cjk="bigrams"), [["한국", "국어", "텍스", "스트"]])


def test_cjk_tokens_are_exempt_from_min_token_length(spark):
    # Single Latin letters still go (min_token_length = 2); single Han characters stay.
    _assert_tokens(spark, ["a 猫 b 狗 ok"], FeatureSettings(cjk="chars"), [["猫", "狗", "ok"]])
    _assert_tokens(spark, ["a 猫 b 狗 ok"], FeatureSettings(cjk="chars", min_token_length=3), [["猫", "狗"]])


# --------------------------------------------------------------------------- NFKC
def test_nfkc_fullwidth_decomposed_accents_and_ligatures(spark):
    texts = [
        "ＡＢＣ ｃｏｍｐｕｔｅｒ",
        "cafe\u0301 re\u0301sume\u0301",
        "ﬁle ﬂow",
        "café résumé",
        "abc computer file flow",
    ]
    nfkc_tokens = [
        ["abc", "computer"],
        ["café", "résumé"],
        ["file", "flow"],
        ["café", "résumé"],
        ["abc", "computer", "file", "flow"],
    ]
    _assert_tokens(spark, texts, FeatureSettings(), nfkc_tokens)
    # The decomposed and the precomposed spellings become the same string (U+00E9).
    assert nfkc_tokens[1][0] == "caf\u00e9"
    # Without normalisation they stay different tokens.
    raw = _tokens(spark, texts, FeatureSettings(normalize="none")).orderBy("id").collect()
    assert raw[0].tokens == ["ａｂｃ", "ｃｏｍｐｕｔｅｒ"]
    assert raw[1].tokens == ["cafe\u0301", "re\u0301sume\u0301"]
    assert raw[2].tokens == ["ﬁle", "ﬂow"]


def test_jvm_and_python_nfkc_agree(spark):
    from pyspark.sql import functions as F

    texts = ["ＡＢＣ ﬁ cafe\u0301 ½ ™ ｶﾀｶﾅ ㍻ ①", "", None, "plain ascii"]
    df = spark.createDataFrame([(i, t) for i, t in enumerate(texts)], "id int, text string")
    jvm = df.select("id", nfkc(F.col("text")).alias("n"))
    py = df.select("id", nfkc_python(F.col("text")).alias("n"))
    assert_df_equality(jvm, py, ignore_nullable=True, ignore_row_order=True)
    import unicodedata

    assert jvm.where("id = 0").first().n == unicodedata.normalize("NFKC", texts[0])


def test_nfkc_falls_back_to_python_when_reflect_is_refused(spark, monkeypatch):
    """A session whose reflect() cannot reach ICU (allow list, restricted mode) still normalises."""
    import pcem_spark.engine.features as features

    monkeypatch.setattr(features, "_ICU_NORMALIZER", "no.such.Normalizer")
    _assert_tokens(spark, ["ＡＢＣ ﬁle cafe\u0301"], FeatureSettings(), [["abc", "file", "café"]])
    # A real mistake is not hidden by the fallback.
    df = spark.createDataFrame([(1, "x")], "id int, body string")
    with pytest.raises(Exception, match="UNRESOLVED_COLUMN"):
        tokenize(df, FeatureSettings(stop_words="english"))


# --------------------------------------------------------------------------- Latin text unchanged
LATIN = [
    "The quick brown fox jumps over the lazy dog; it's 2024 and 3D graphics cost $5.",
    "Ça va? Naïve café owners in São Paulo sold crème brûlée (über-good) for 12 reais!",
    "e-mail: john_doe@example.com, URL http://x.org/a_b?c=d -- x y z 42nd 1st",
    "Gothic 𐌰𐌱 and emoji 🙂 next to a b cc",
]


def _pre_change_tokens(df, text_col="text"):
    """What tokenize() did before normalize / cjk existed (RegexTokenizer + StopWordsRemover)."""
    tok = RegexTokenizer(
        inputCol=text_col,
        outputCol="raw",
        pattern=DEFAULT_TOKEN_PATTERN,
        gaps=False,
        toLowercase=True,
        minTokenLength=2,
    )
    remover = StopWordsRemover(
        inputCol="raw", outputCol="tokens", stopWords=StopWordsRemover.loadDefaultStopWords("english")
    )
    return remover.transform(tok.transform(df)).select("id", "tokens")


@pytest.mark.parametrize(
    "settings", [FeatureSettings(), FeatureSettings(cjk="chars"), FeatureSettings(normalize="none", cjk="none")]
)
def test_latin_text_tokenised_exactly_as_before(spark, settings):
    df = spark.createDataFrame([(i, t) for i, t in enumerate(LATIN)], "id int, text string")
    assert_df_equality(
        tokenize(df, replace(settings, stop_words="english")).select("id", "tokens"),  # "auto" is decided in training
        _pre_change_tokens(df),
        ignore_nullable=True,
        ignore_row_order=True,
    )


def test_tokenize_keeps_the_other_columns(spark):
    df = spark.createDataFrame([(1, "数据 data", "x")], "id int, text string, other string")
    out = tokenize(df, FeatureSettings(stop_words="english"))
    assert out.columns == ["id", "text", "other", "tokens"]


# --------------------------------------------------------------------------- settings
def test_from_dict_maps_missing_keys_to_the_old_behaviour():
    old_meta = {
        "token_pattern": DEFAULT_TOKEN_PATTERN,
        "min_token_length": 2,
        "stop_words": "english",
        "min_df": 3.0,
        "max_df": 0.5,
        "vocab_size": 20000,
        "vocabulary_docs": "all",
    }
    fs = FeatureSettings.from_dict(old_meta)
    assert (fs.normalize, fs.cjk) == ("none", "none")
    # New metadata round-trips unchanged, defaults included.
    assert FeatureSettings.from_dict(asdict(FeatureSettings())) == FeatureSettings()
    assert FeatureSettings().normalize == "nfkc" and FeatureSettings().cjk != "none"
    with pytest.raises(ValueError, match="unknown feature settings"):
        FeatureSettings.from_dict({**old_meta, "stemmer": "porter"})
    with pytest.raises(ValueError, match="features.cjk"):
        FeatureSettings.from_dict({**old_meta, "cjk": "trigrams"})


def test_settings_validate_and_config_overrides():
    from pcem_spark.cli.config import load_settings

    s = load_settings(None, ["features.cjk=chars", "features.normalize=none"])
    assert (s.features.cjk, s.features.normalize) == ("chars", "none")
    with pytest.raises(ValueError, match="features.normalize"):
        load_settings(None, ["features.normalize=nfc"])


def test_pathem_params_map_onto_the_new_settings():
    from pcem_spark.ml.estimator import PathEM

    assert PathEM().feature_settings() == FeatureSettings()
    fs = PathEM(cjk="chars", normalize="none").feature_settings()
    assert (fs.cjk, fs.normalize) == ("chars", "none")


def _strip_new_keys(model_dir):
    """Rewrite a saved model's metadata as a version without normalize / cjk wrote it."""
    parts = [p for p in glob.glob(os.path.join(model_dir, "metadata", "part-*")) if os.path.getsize(p)]
    assert len(parts) == 1, parts
    meta = json.loads(open(parts[0], encoding="utf-8").read())
    for key in ("normalize", "cjk"):
        meta["feature_settings"].pop(key)
    with open(parts[0], "w", encoding="utf-8") as fh:
        fh.write(json.dumps(meta) + "\n")
    # Hadoop's local file system would reject the edited file against its old checksum.
    crc = os.path.join(os.path.dirname(parts[0]), f".{os.path.basename(parts[0])}.crc")
    if os.path.exists(crc):
        os.remove(crc)
    drop_manifest(model_dir)  # ... nor was its marker's manifest there


@pytest.mark.slow
def test_old_model_keeps_predicting_exactly_as_before(spark, tmp_path):
    """A model saved before normalize / cjk existed tokenises with the old behaviour after loading."""
    from pcem_spark.core.taxonomy import Taxonomy
    from pcem_spark.ml import train
    from pcem_spark.ml.estimator import PathEMModel
    from pcem_spark.model.path_model import PathModel
    from pcem_spark.model.settings import ModelSettings

    tax = Taxonomy({"ROOT": ["a", "b"]})
    rows = [
        ("a1", "ﬁnance ＡＢＣ 北京天安门 money", ["a"]),
        ("a2", "ﬁnance bank 北京天安门", ["a"]),
        ("b1", "finance abc sport 上海 goal", ["b"]),
        ("b2", "finance abc 上海 goal team", ["b"]),
        ("u1", "ﬁnance money bank", None),
        ("u2", "sport goal team", None),
    ]
    docs = spark.createDataFrame(rows, DOC_SCHEMA)
    # Models of that age always hold a resolved stop list ("auto" is decided before the vocabulary) and read no
    # document vectors.
    old_fs = FeatureSettings(
        min_df=1, max_df=1.0, vocab_size=0, normalize="none", cjk="none", stop_words="english", embedding="none"
    )
    model, _ = train(
        docs,
        tax,
        old_fs,
        ModelSettings(method="pcnb", smoothing=1.0, unlabeled_weight=1.0, path_weight=1.0, family="generative"),
    )
    assert "ﬁnance" in model.vocabulary and "北京天安门" in model.vocabulary
    path = str(tmp_path / "old-model")
    model.save(path)
    _strip_new_keys(path)

    loaded = PathModel.load(path)
    assert loaded.feature_settings == old_fs
    new = spark.createDataFrame(
        [("n1", "ﬁnance ＡＢＣ 北京天安门", None), ("n2", "finance abc 北京 天安门", None)], DOC_SCHEMA
    )
    cols = ["id", "path", "probability"]
    assert_df_equality(
        loaded.transform(new).select(*cols),
        model.transform(new).select(*cols),
        ignore_row_order=True,
        ignore_nullable=True,
    )
    # With today's defaults the same words would be tokenised differently (the point of from_dict).
    today = tokenize(new, FeatureSettings(stop_words="english")).orderBy("id").first().tokens
    assert "ﬁnance" not in today and "北京天安门" not in today
    # The PathEM Params of a loaded model say so too.
    ml_model = PathEMModel.read().load(path)
    assert ml_model.getOrDefault("cjk") == "none" and ml_model.getOrDefault("normalize") == "none"


# --------------------------------------------------------------------------- small corpora / Chinese corpus
def test_tiny_corpus_error_names_the_document_count_and_settings(spark):
    docs = spark.createDataFrame([(f"d{i}", f"alpha beta gamma {i}", None) for i in range(3)], DOC_SCHEMA)
    with pytest.raises(ValueError) as err:
        fit_vocabulary(docs, FeatureSettings(stop_words="english"))  # min_df 2, max_df 0.5: 4 documents at least
    msg = str(err.value)
    assert "3 documents are too few" in msg and "at least 4 documents" in msg
    assert "features.min_df=1" in msg and "features.max_df=1.0" in msg
    assert "maxDF must be" not in msg
    # The suggested settings work.
    assert sorted(fit_vocabulary(docs, FeatureSettings(min_df=1, max_df=1.0, stop_words="english"))) == [
        "alpha",
        "beta",
        "gamma",
    ]


def test_tiny_labelled_vocabulary_error_says_labelled(spark):
    rows = [(f"d{i}", "alpha beta", ["x"] if i < 2 else None) for i in range(10)]
    docs = spark.createDataFrame(rows, DOC_SCHEMA)
    with pytest.raises(ValueError, match="2 labelled documents are too few"):
        fit_vocabulary(docs, FeatureSettings(vocabulary_docs="labeled", stop_words="english"))


def test_chinese_corpus_vocabulary_empty_without_cjk_splitting(spark):
    docs = spark.createDataFrame(corpus_rows(CHINESE, 2), DOC_SCHEMA)
    with pytest.raises(ValueError, match="vocabulary is empty.*features.cjk"):
        fit_vocabulary(docs, FeatureSettings(cjk="none", stop_words="english"))


@pytest.mark.slow
def test_chinese_corpus_trains_with_the_default_settings(spark):
    from pcem_spark.core.taxonomy import Taxonomy
    from pcem_spark.evaluation.metrics import evaluate_predictions
    from pcem_spark.ml import train
    from pcem_spark.model.settings import ModelSettings

    tax = Taxonomy(TAXONOMY)
    docs = spark.createDataFrame(corpus_rows(CHINESE, 3), DOC_SCHEMA)
    model, result = train(docs, tax, FeatureSettings(), ModelSettings(method="pcnb"))
    assert len(model.vocabulary) > 50
    assert all(len(t) <= 2 for t in model.vocabulary)
    truth = spark.createDataFrame(corpus_rows(CHINESE, 0, all_labels=True), DOC_SCHEMA)
    m = evaluate_predictions(model.transform(truth), tax)
    assert m["micro_f1"] > 0.5, m
    feats = featurize(truth, model.vocabulary, model.feature_settings)
    # Every sentence keeps some known characters (it was one unknown token before).
    assert all(r.features.numNonzeros() > 0 for r in feats.select("features").collect())


# --------------------------------------------------------------------------- measurement (docs/TOKENIZATION.md)
def measure(methods=("pcnb", "pcem"), modes=("none", "chars", "bigrams"), labeled=(1, 3), seeds=range(5), min_df=3.0):
    """Micro / macro F1 of each cjk mode on the Chinese and Japanese corpora, averaged over seeds.

    The labelled documents of each seed are a random ``labeled`` per leaf; the
    rest are unlabelled (for EM) and scored. Default settings but ``cjk`` and ``min_df``.
    """
    import statistics

    from pyspark.sql import SparkSession

    from pcem_spark.core.taxonomy import Taxonomy
    from pcem_spark.evaluation.metrics import evaluate_predictions
    from pcem_spark.ml import train
    from pcem_spark.model.settings import ModelSettings

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    tax = Taxonomy(TAXONOMY)
    print("| corpus | labelled/leaf | method | cjk | V | micro-F1 | macro-F1 |")
    print("|---|---|---|---|---|---|---|")
    for name, sentences in (("Chinese (80 docs)", CHINESE), ("Japanese (48 docs)", JAPANESE)):
        for k in labeled:
            for method in methods:
                for mode in modes:
                    micro, macro, sizes, error = [], [], [], ""
                    for seed in seeds:
                        docs = spark.createDataFrame(corpus_rows(sentences, k, seed), DOC_SCHEMA)
                        try:
                            model, _ = train(
                                docs, tax, FeatureSettings(cjk=mode, min_df=min_df), ModelSettings(method=method)
                            )
                        except ValueError as exc:
                            error = str(exc).split(":")[0]
                            break
                        pred = (
                            model.transform(docs.where("labels is null"))
                            .select("id", "path")
                            .join(
                                spark.createDataFrame(corpus_rows(sentences, 0, all_labels=True), DOC_SCHEMA).select(
                                    "id", "labels"
                                ),
                                "id",
                            )
                        )
                        m = evaluate_predictions(pred, tax)
                        micro.append(m["micro_f1"])
                        macro.append(m["macro_f1"])
                        sizes.append(len(model.vocabulary))
                    if error:
                        print(f"| {name} | {k} | {method} | {mode} | 0 | fails: {error} | |")
                    else:
                        print(
                            f"| {name} | {k} | {method} | {mode} | {statistics.mean(sizes):.0f} | "
                            f"{100 * statistics.mean(micro):.1f} | {100 * statistics.mean(macro):.1f} |",
                            flush=True,
                        )


if __name__ == "__main__":
    # python tests/test_tokenize.py [min_df [method,... [mode,... [labelled,...]]]]
    import sys

    args = sys.argv[1:] + [None] * 4
    measure(
        methods=tuple(args[1].split(",")) if args[1] else ("pcnb", "pcem"),
        modes=tuple(args[2].split(",")) if args[2] else ("none", "chars", "bigrams"),
        labeled=tuple(int(k) for k in args[3].split(",")) if args[3] else (1, 3),
        min_df=float(args[0]) if args[0] else 3.0,
    )


def test_count_vectorizer_model_equals_spark_from_vocabulary(spark):
    """The one-batch vocabulary transfer gives the JVM the same terms, in the same order, as from_vocabulary."""
    from pyspark.ml.feature import CountVectorizerModel

    vocabulary = ["finance", "北", "京", "café", "bank", "x" * 300, "ﬁ", "goal"]
    tokens = spark.createDataFrame(
        [("d1", ["finance", "café", "北", "北", "ﬁ", "zzz"]), ("d2", ["goal", "x" * 300, "bank", "京"]), ("d3", [])],
        "id string, tokens array<string>",
    )
    ours = count_vectorizer_model(spark, vocabulary, "f")
    assert list(ours.vocabulary) == vocabulary
    reference = CountVectorizerModel.from_vocabulary(vocabulary, inputCol="tokens", outputCol="f")
    assert_df_equality(ours.transform(tokens), reference.transform(tokens), ignore_row_order=True)
    with pytest.raises(ValueError, match="empty"):
        count_vectorizer_model(spark, [], "f")
