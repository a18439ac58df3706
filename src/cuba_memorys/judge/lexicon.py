"""The word lists the text rules read (text_rules.py), English and Spanish, folded (no accents).

Each list names a way a clause stops being a plain statement of its words: a negation, a
condition, a hedge, a quantifier, a bound, a direction. They are general-purpose lists, not
tuned to any benchmark pair; a word missing from them makes the rules decide less, never wrongly
in the common case, because a clause is compared only when nothing in it is listed as unsafe.
"""

from __future__ import annotations


def split(text: str) -> list[str]:
    return text.split()


def listed(text: str) -> frozenset[str]:
    return frozenset(split(text))


NEGATIONS = listed("not no never none nothing nobody nowhere neither nor cannot nunca jamas tampoco ni ningun"
                   " ninguna ninguno nada nadie")
# Phrases that contain a negation word without negating the clause ("not only X": X holds).
NOT_NEGATING = {("not", "only"), ("not", "just"), ("no", "doubt"), ("no", "matter"), ("nothing", "but"),
                ("no", "solo"), ("no", "solamente"), ("no", "importa"), ("not", "merely")}
CONTRAST = listed("but however although though whereas while yet except unlike instead pero aunque sino"
                  " mientras excepto salvo")
AND = listed("and y e")
# A sentence holding one of these states a condition, not a fact.
CONDITIONAL = listed("if unless whether whenever when once provided si cuando")
# A note to self ("TODO: we use Redis") asserts nothing in its whole sentence.
NOTE_MARKERS = listed("todo fixme xxx tbd wip pendiente")
# A sentence opening with these is an instruction ("Don't use Redis", "Never deploy on Friday"), not a fact.
INSTRUCTION_OPENERS = {("do", "not"), ("never",), ("nunca",), ("please",)}
# Auxiliaries that open a question even without its "?" ("Do we use Redis").
QUESTION_OPENERS = listed("do does did is are was were can could should will would has have may might")
# A hedge, a report, a plan, an obligation, a future, a disjunction, an implicit negative, a
# privative modifier ("mock", "toy"), a note to self: the clause does not plainly assert its words.
HEDGES = listed(
    "may might could would should maybe perhaps possibly probably likely unlikely seem seems seemed appear"
    " appears appeared suppose supposed think thinks thought believe believes believed guess hope hoped"
    " want wants wanted plan plans planned planning intend intends propose proposed suggest suggests"
    " suggested consider considered considering try tries tried trying expect expected claim claims claimed"
    " say says said tell tells told reportedly allegedly wish or either formerly previously former"
    " will shall need needs needed until"
    " refuse refused avoid avoids avoided deny denies denied lack lacks lacked without"
    " stop stops stopped quit prevent prevents prevented forbid forbids forbidden ban banned reject rejected"
    " decline declined cease ceased abandon abandoned unable impossible hardly barely rarely seldom"
    " scarcely false fake wrong rather few almost nearly pretend pretends pretending pretended imagine"
    " imagines imagined dream dreams toy replica imitation mock fictional counterfeit pseudo"
    " quiza quizas tal vez puede pueden podria podrian deberia deberian probablemente posiblemente parece"
    " parecia creo cree creia pienso piensa dijo dice dicen segun supuestamente quiere queria planea"
    " propone propuso sugiere intenta intento espera o u antes solia solian sin rechaza rechazo niega nego"
    " evita evito falta faltan dejo dejaron deja prohibe imposible apenas casi falso finge fingen imagina"
    " juguete replica imitacion ficticio ficticia necesita necesitan necesitamos")
# "fail"/"have"/"going" hedge only before "to": "failed to start", "has to run", "going to move".
HEDGED_BEFORE_TO = listed("fail fails failed failing have has had going used")
HEDGED_BEFORE_QUE = listed("tiene tienen tenemos hay")  # "tiene que", "hay que": an obligation
# Quantifiers, frequencies and modals of obligation: claim and evidence must agree on them.
UNIVERSAL = listed("all every each always todos todas todo cada siempre ambos ambas both")
SCOPE = UNIVERSAL | listed(
    "only solo solamente unicamente some several any sometimes often usually mostly generally occasionally"
    " partly partially mainly many most must required algunos algunas varios varias veces frecuentemente"
    " normalmente generalmente ocasionalmente parcialmente principalmente muchos muchas mayoria cualquier"
    " debe deben obligatorio")
# Bounds and approximations: the number after them is not a value to compare.
BOUNDS = {("at", "least"): "≥", ("at", "most"): "≤", ("more", "than"): ">", ("less", "than"): "<",
          ("up", "to"): "≤", ("al", "menos"): "≥", ("mas", "de"): ">", ("menos", "de"): "<",
          ("hasta",): "≤", ("over",): ">", ("under",): "<", ("above",): ">", ("below",): "<",
          ("about",): "~", ("around",): "~", ("approximately",): "~", ("roughly",): "~", ("unos",): "~",
          ("unas",): "~", ("aproximadamente",): "~", ("alrededor",): "~", ("cerca",): "~"}
# Where or which way: "in front of the hut" is not "in the hut", "looking up" is not "looking down".
RELATIONS = listed("up down off out over under above below before after against between into onto front"
                   " behind near next beside top bottom inside outside across along beyond opposite toward"
                   " towards away back arriba abajo delante detras cerca lejos junto encima debajo dentro"
                   " fuera despues contra entre hacia")
# Subject pronouns stay content words: "I am a member" needs an "I" in the evidence.
PRONOUNS = listed("i you he she we they yo tu usted ella ellos ellas nosotros vosotros")
# A clause opening with these describes or compares ("as a member of ..."); it asserts nothing.
NOT_PREDICATING = listed("as like including such como incluyendo")
# A number after these names a thing ("version 3", "Python 3.8", "issue 42"): it belongs to the
# words that must match, not to the quantities that may differ.
IDENTIFIERS = listed("version v release issue ticket pr step phase stage sprint python node java ruby php"
                     " postgresql postgres mysql ubuntu debian windows macos ios android chapter section page"
                     " figure table room number id rfc iso http tls paso fase pagina seccion numero sala")
# A clause with a month in it holds a date, whose numbers ("1 July 1910") are no quantities.
MONTHS = listed("january february march april may june july august september october november december jan feb"
                " mar apr jun jul aug sep sept oct nov dec enero febrero marzo abril mayo junio julio agosto"
                " septiembre setiembre octubre noviembre diciembre")
NEW_SUBJECT = listed("the a an this that these those there we they it he she i you our its their el la los"
                     " las un una unos unas este esta estos estas ese esa hay nosotros ellos ellas")
# Words that add nothing to what a clause states ("hashed using argon2id" = "hashed with argon2id").
LIGHT = listed("using via through mediante usando utilizando also really actually currently still too even"
               " tambien realmente actualmente todavia aun")
# Counted from two: "one" and "uno" are as often pronouns and articles as numbers.
NUMBER_WORDS = {w: str(i) for words in (
    "zero _ two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen"
    " seventeen eighteen nineteen twenty",
    "cero _ dos tres cuatro cinco seis siete ocho nueve diez once doce trece catorce quince dieciseis"
    " diecisiete dieciocho diecinueve veinte") for i, w in enumerate(split(words)) if w != "_"}
# Listed synonyms: each group is one token after stemming, in English and Spanish. "valid" is the
# lifetime of "expire" only with a duration ("valid for 30 minutes"): text_rules.py checks that.
SYNONYMS = {
    "=write": "write writes wrote written writing implement implements implemented build builds built"
              " develop develops developed code coded escrito escrita escritos escribir implementado"
              " implementada construido construida desarrollado desarrollada programado programada",
    "=expire": "expire expires caduca caducan caducar vence vencen vencer expira expiran",
    "=use": "use uses used utilize utilizes utilized employ employs employed usa usan usar usamos utiliza"
            " utilizan utilizar utilizamos emplea emplean",
    "=run": "run runs ran running execute executes executed ejecuta ejecutan ejecutar corre corren",
    "=start": "start starts started begin begins began inicia inician comienza comienzan empieza empiezan",
    "=store": "store stores stored save saves saved persist persists persisted keep keeps kept guarda"
              " guardan almacena almacenan",
    "=listen": "listen listens listened escucha escuchan",
    "=big": "big large huge grande grandes",
    "=small": "small little tiny pequeno pequena pequenos pequenas",
    "=fast": "fast quick quickly rapido rapida rapidamente",
    "=remove": "remove removes removed delete deletes deleted elimina eliminan borra borran",
}
VALID_FORMS = listed("valid valido valida validos validas")
UNITS = {
    "ms": "ms", "millisecond": "ms", "milliseconds": "ms", "milisegundo": "ms", "milisegundos": "ms",
    "s": "s", "sec": "s", "secs": "s", "second": "s", "seconds": "s", "segundo": "s", "segundos": "s",
    "min": "min", "mins": "min", "minute": "min", "minutes": "min", "minuto": "min", "minutos": "min",
    "h": "h", "hr": "h", "hrs": "h", "hour": "h", "hours": "h", "hora": "h", "horas": "h",
    "day": "d", "days": "d", "dia": "d", "dias": "d", "week": "w", "weeks": "w", "semana": "w", "semanas": "w",
    "kb": "kb", "mb": "mb", "gb": "gb", "tb": "tb", "kib": "kb", "mib": "mb", "gib": "gb",
}
TIME_UNITS = frozenset(("@ms", "@s", "@min", "@h", "@d", "@w"))
# English contractions other than n't: "we'll" is "we will", "it's" is "it is".
CONTRACTIONS = {"ll": "will", "re": "are", "ve": "have", "m": "am", "d": "would", "s": ""}
CONTRACTED_NOT = {"can't": "can", "won't": "will", "shan't": "shall", "ain't": "is"}
# The passive voice ("webhooks are retried", "se cifran"): a form of "to be" before a participle,
# or Spanish "se" before a verb. Voice decides whether a claim's words may come in another order
# than the evidence's ("retries failed webhooks" / "failed webhooks are retried").
BE_FORMS = listed("is are was were be been being es son fue fueron era eran sido esta estan estaba estaban")
PARTICIPLES = listed(
    "built sent kept run made held set put read done shown known written taken given seen found told paid"
    " sold brought bought thought caught taught left lost met cut hit shut spread split spent won drawn"
    " driven eaten chosen frozen broken spoken stolen hidden ridden grown thrown worn torn born begun"
    " sung drunk swum understood stood")
PARTICIPLE_ENDINGS = ("ed", "en", "ado", "ada", "ados", "adas", "ido", "ida", "idos", "idas")
SE = listed("se")
# Prepositions that open a restriction of place, time or purpose ("in staging", "during the night",
# "para las sesiones"): evidence words inside one make it another statement than a claim without them.
QUALIFYING = listed("in on at for during within en para durante dentro")
ARTICLES = listed("the a an this that these those its their our el la los las un una unos unas su sus")
# English irregular verbs: the past and participle forms the stemmer cannot bring back to their
# base ("ridden"/"riding", "drunk"/"drinking", "wrote"/"writes"). A general list, not a benchmark's.
IRREGULAR_VERBS = {form: base for base, forms in (
    ("be", "was were been"), ("begin", "began begun"), ("break", "broke broken"), ("bring", "brought"),
    ("build", "built"), ("buy", "bought"), ("catch", "caught"), ("choose", "chose chosen"),
    ("come", "came"), ("dig", "dug"), ("do", "did done"), ("draw", "drew drawn"), ("drink", "drank drunk"),
    ("drive", "drove driven"), ("eat", "ate eaten"), ("fall", "fell fallen"), ("feed", "fed"),
    ("fight", "fought"), ("find", "found"), ("fly", "flew flown"), ("forget", "forgot forgotten"),
    ("freeze", "froze frozen"), ("get", "got gotten"), ("give", "gave given"), ("go", "went gone"),
    ("grow", "grew grown"), ("hang", "hung"), ("hide", "hid hidden"), ("hold", "held"),
    ("keep", "kept"), ("know", "knew known"), ("lay", "laid"), ("lead", "led"), ("leave", "left"),
    ("lend", "lent"), ("lie", "lay lain"), ("lose", "lost"), ("make", "made"), ("meet", "met"),
    ("pay", "paid"), ("ride", "rode ridden"), ("ring", "rang rung"), ("rise", "rose risen"),
    ("run", "ran"), ("say", "said"), ("see", "saw seen"), ("seek", "sought"), ("sell", "sold"),
    ("send", "sent"), ("shake", "shook shaken"), ("shine", "shone"), ("shoot", "shot"),
    ("show", "showed shown"), ("sing", "sang sung"), ("sink", "sank sunk"), ("sit", "sat"),
    ("sleep", "slept"), ("speak", "spoke spoken"), ("spend", "spent"), ("stand", "stood"),
    ("steal", "stole stolen"), ("stick", "stuck"), ("swim", "swam swum"), ("swing", "swung"),
    ("take", "took taken"), ("teach", "taught"), ("tear", "tore torn"), ("tell", "told"),
    ("think", "thought"), ("throw", "threw thrown"), ("understand", "understood"), ("wake", "woke woken"),
    ("wear", "wore worn"), ("win", "won"), ("write", "wrote written"))
    for form in split(forms)}
# Quantifiers a claim may add to evidence that has none: "the cat drinks some milk" is what "the
# cat drinks the milk" says too. Universal ones ("all", "every") are never added this way.
EXISTENTIAL = listed("some algunos algunas")
