# SPDX-License-Identifier: MIT
"""nbrun_display: results a model can read without eyes.

An IPython extension the python3 kernel loads at start (nbrun-kernel passes
--ext nbrun_display). It adds two display formatters, so that beside the
PNG of every matplotlib figure shown (plt.show(), the inline backend's
end-of-cell flush, a figure as the last value, display(fig)) and beside the
HTML of every pandas DataFrame shown, the output carries a JSON description:

  application/vnd.nbrun.chart+json   kind, title, per axes the axis labels
                                     and the series with their points
  application/vnd.nbrun.table+json   shape, columns, dtypes, the first rows

Both are documented by schemas/chart.schema.json and table.schema.json.
They are bounded: at most MAX_AXES axes, MAX_SERIES series per axes and
MAX_POINTS points per series (an evenly spaced sample, first and last point
kept), MAX_ROWS rows and MAX_COLUMNS columns, text cut at MAX_TEXT
characters, and the whole description at most MAX_BYTES bytes of compact
JSON (fewer points or rows until it fits); "truncated": true says something
was left out. Numbers are the doubles plotted (integers when whole); NaN
and infinities are null. Nothing here imports matplotlib or pandas: the formatters match
objects by their class's module and name, and a
description that fails is left out (the figure's PNG and the table's HTML
are unaffected).
"""
import json
import math
import numbers

CHART_MIME = "application/vnd.nbrun.chart+json"
TABLE_MIME = "application/vnd.nbrun.table+json"
VERSION = 1

MAX_AXES = 8
MAX_SERIES = 20
MAX_POINTS = 500
MAX_ROWS = 20
MAX_COLUMNS = 50
MAX_TEXT = 200
MAX_BYTES = 16000
ROW_STEPS = (MAX_ROWS, 10, 5, 2, 1, 0)


# ---- values -------------------------------------------------------------------------

def _text(s):
    """A label or cell as bounded text; None for empty or hidden ('_...') labels."""
    if s is None:
        return None
    try:
        s = str(s)
    except Exception:
        return None
    return s if len(s) <= MAX_TEXT else s[:MAX_TEXT - 3] + "..."


def _label(s):
    s = _text(s)
    if not s or s.startswith("_"):
        return None
    return s


def _number(v):
    """A finite number as the double it is (an integer when whole); None otherwise."""
    try:
        f = float(v)
    except (TypeError, ValueError, OverflowError):
        return None
    if not math.isfinite(f):
        return None
    if f.is_integer() and abs(f) < 2 ** 53:
        return int(f)
    return f


def _numbers(a):
    """_number of every element of a numeric numpy array, without a call per element."""
    if a.dtype.kind in "iub":
        return a.tolist()
    return [(int(v) if v.is_integer() and abs(v) < 2 ** 53 else v) if math.isfinite(v) else None
            for v in a.astype(float).tolist()]


def _value(v):
    """Any data value as JSON: numbers, booleans, dates as ISO text, else bounded text."""
    if v is None:
        return None
    if isinstance(v, bool):
        return v
    try:
        import numpy as np
        if isinstance(v, np.bool_):
            return bool(v)
        if isinstance(v, np.datetime64):
            if np.isnat(v):
                return None
            d = v.astype("datetime64[us]").item()
            return d.isoformat() if hasattr(d, "isoformat") else str(np.datetime_as_string(v))
        if isinstance(v, np.timedelta64):
            return None if np.isnat(v) else _text(v)
    except ImportError:
        pass
    if isinstance(v, numbers.Integral):
        i = int(v)
        return i if abs(i) < 2 ** 53 else str(i)
    if isinstance(v, numbers.Real):
        return _number(v)
    if isinstance(v, str):
        return _text(v)
    iso = getattr(v, "isoformat", None)
    if callable(iso):
        try:
            # pandas' NaT has isoformat() too
            if v != v:
                return None
            return _text(iso())
        except Exception:
            pass
    try:
        if v != v:             # pandas.NA, NaT and similar missing values
            return None
    except Exception:
        pass
    return _text(v)


def _sample(n, cap):
    """Indices of at most cap evenly spaced points among n, first and last kept."""
    if n <= cap:
        return list(range(n))
    if cap <= 1:
        return [0]
    return sorted({round(i * (n - 1) / (cap - 1)) for i in range(cap)})


def _size(obj):
    return len(json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


# ---- charts -------------------------------------------------------------------------

def _decoder(axis):
    """Maps a plotted (converted) coordinate back to the data's value: a
    category's name, a fixed tick label (pandas' bar charts), a date, else
    the number."""
    import matplotlib.category
    import matplotlib.dates
    import matplotlib.ticker

    units = getattr(axis, "units", None)
    if isinstance(units, matplotlib.category.UnitData):
        names = {v: k for k, v in units._mapping.items()}
        return lambda x: _text(names[x]) if _number(x) in names else _number(x)
    fmt, loc = axis.get_major_formatter(), axis.get_major_locator()
    if isinstance(fmt, matplotlib.ticker.FixedFormatter) and \
            isinstance(loc, matplotlib.ticker.FixedLocator):
        labels = {}
        for pos, name in zip(loc.locs, fmt.seq):
            p = _number(pos)
            if p is not None and name:
                labels[p] = _text(name)
        if labels:
            return lambda x: labels.get(_number(x), _number(x))
    conv = getattr(axis, "converter", None)
    if isinstance(conv, (matplotlib.dates.DateConverter,
                         getattr(matplotlib.dates, "_SwitchableDateConverter", ()))):
        def date(x):
            n = _number(x)
            if n is None:
                return None
            try:
                d = matplotlib.dates.num2date(x)
                if d.utcoffset() is not None and not d.utcoffset():
                    d = d.replace(tzinfo=None)
                return d.isoformat()
            except Exception:
                return n
        return date
    return _number


def _raw_values(seq, idx):
    """The values at idx of a data sequence as it was plotted (dates, names or numbers)."""
    import numpy as np
    try:
        arr = np.ma.asarray(seq)
        if np.ma.is_masked(arr):
            arr = arr.astype(object).filled(None)
        arr = np.asarray(arr)
    except Exception:
        arr = list(seq)
    if isinstance(arr, np.ndarray) and arr.dtype.kind in "iubf":
        return _numbers(arr[idx])
    out = []
    for i in idx:
        v = arr[i]
        if hasattr(v, "item") and not isinstance(v, np.datetime64):
            try:
                v = v.item()
            except Exception:
                pass
        out.append(_value(v))
    return out


def _series_lines(ax):
    out = []
    for line in ax.get_lines():
        # reference lines (axhline, axvline) are placed in axes coordinates
        if line.get_transform() is not ax.transData or not line.get_visible():
            continue
        try:
            x, y = line.get_xdata(orig=True), line.get_ydata(orig=True)
            n = min(len(x), len(y))
        except TypeError:
            continue
        marker = line.get_marker()
        only_markers = line.get_linestyle() in ("None", "", " ", "none") and \
            marker not in (None, "None", "", " ", "none")
        out.append(dict(kind="scatter" if only_markers else "line",
                        label=_label(line.get_label()), n=n,
                        build=lambda idx, x=x, y=y: (_raw_values(x, idx), _raw_values(y, idx))))
    return out


def _series_scatter(ax, dx, dy):
    import matplotlib.collections
    import numpy as np
    out = []
    for coll in ax.collections:
        if not isinstance(coll, matplotlib.collections.PathCollection) or not coll.get_visible():
            continue
        try:
            offs = np.ma.asarray(coll.get_offsets(), dtype=float).filled(np.nan)
        except Exception:
            continue
        if offs.ndim != 2 or offs.shape[1] != 2 or len(offs) == 0:
            continue

        def build(idx, offs=offs):
            xs, ys = offs[idx, 0], offs[idx, 1]
            return ([dx(v) for v in xs] if dx is not _number else _numbers(xs),
                    [dy(v) for v in ys] if dy is not _number else _numbers(ys))
        out.append(dict(kind="scatter", label=_label(coll.get_label()), n=len(offs), build=build))
    return out


def _contiguous(rects, vertical):
    if len(rects) < 2:
        return False
    for a, b in zip(rects, rects[1:]):
        if vertical:
            end, start, w = a.get_x() + a.get_width(), b.get_x(), abs(a.get_width())
        else:
            end, start, w = a.get_y() + a.get_height(), b.get_y(), abs(a.get_height())
        if not w or abs(end - start) > 1e-9 * max(1.0, abs(start), w):
            return False
    return True


def _series_bars(ax, dx, dy):
    import matplotlib.category
    import matplotlib.container
    import matplotlib.ticker
    out = []
    for cont in ax.containers:
        if not isinstance(cont, matplotlib.container.BarContainer):
            continue
        rects = [r for r in cont.patches if r.get_visible()]
        if not rects:
            continue
        vertical = getattr(cont, "orientation", None) != "horizontal"
        values = getattr(cont, "datavalues", None)
        if values is None or len(values) != len(cont.patches):
            values = [r.get_height() if vertical else r.get_width() for r in cont.patches]
        values = [v for r, v in zip(cont.patches, values) if r.get_visible()]
        axis = ax.xaxis if vertical else ax.yaxis
        categorical = isinstance(getattr(axis, "units", None), matplotlib.category.UnitData) or \
            isinstance(axis.get_major_formatter(), matplotlib.ticker.FixedFormatter)
        hist = not categorical and _contiguous(rects, vertical)

        def build(idx, rects=rects, values=values, vertical=vertical):
            pos, val = [], []
            for i in idx:
                r = rects[i]
                if vertical:
                    pos.append(dx(r.get_x() + r.get_width() / 2))
                    val.append(_value(values[i]))
                else:
                    pos.append(dy(r.get_y() + r.get_height() / 2))
                    val.append(_value(values[i]))
            return (pos, val) if vertical else (val, pos)
        s = dict(kind="histogram" if hist else "bar", label=_label(cont.get_label()),
                 n=len(rects), build=build)
        if not vertical:
            s["orientation"] = "horizontal"
        if hist:
            if vertical:
                edges = [r.get_x() for r in rects] + [rects[-1].get_x() + rects[-1].get_width()]
            else:
                edges = [r.get_y() for r in rects] + [rects[-1].get_y() + rects[-1].get_height()]
            s["bin_edges"] = edges
        out.append(s)
    return out


def _series_pie(ax):
    import matplotlib.patches
    wedges = [p for p in ax.patches if isinstance(p, matplotlib.patches.Wedge) and p.get_visible()]
    if not wedges:
        return []

    def build(idx):
        return ([_label(wedges[i].get_label()) for i in idx],
                [_number((wedges[i].theta2 - wedges[i].theta1) / 360.0) for i in idx])
    return [dict(kind="pie", label=None, n=len(wedges), build=build, pie=True)]


def _axes_title(ax):
    for where in ("center", "left", "right"):
        t = ax.get_title(where)
        if t:
            return _text(t)
    return None


def _kind_of(kinds):
    kinds = set(kinds)
    if not kinds:
        return "unknown"
    return kinds.pop() if len(kinds) == 1 else "mixed"


def _collect(fig):
    """Per axes: its facts and its series, each with a build(indices) for its points."""
    axes = []
    for ax in fig.axes:
        if not ax.get_visible() or ax.get_label() == "<colorbar>":
            continue
        try:
            dx, dy = _decoder(ax.xaxis), _decoder(ax.yaxis)
        except Exception:
            dx = dy = _number
        series = []
        for part in (lambda: _series_lines(ax), lambda: _series_scatter(ax, dx, dy),
                     lambda: _series_bars(ax, dx, dy), lambda: _series_pie(ax)):
            try:
                series += part()
            except Exception:
                pass
        facts = {"kind": _kind_of(s["kind"] for s in series), "title": _axes_title(ax),
                 "x_label": _text(ax.get_xlabel()) or None,
                 "y_label": _text(ax.get_ylabel()) or None}
        for name in ("x", "y"):
            try:
                facts[name + "_scale"] = getattr(ax, "get_%sscale" % name)()
            except Exception:
                pass
        axes.append((facts, series))
    return axes


def _render(axes, cap, max_series):
    out, truncated = [], len(axes) > MAX_AXES
    for facts, series in axes[:MAX_AXES]:
        a = dict(facts)
        a["n_series"] = len(series)
        a["series"] = []
        a_trunc = len(series) > max_series
        for s in series[:max_series]:
            # the points at MAX_POINTS are read once; a smaller cap takes an
            # evenly spaced subset of them (first and last kept)
            if "points" not in s:
                try:
                    s["points"] = s["build"](_sample(s["n"], MAX_POINTS))
                except Exception:
                    s["points"] = None
            if s["points"] is None:
                continue
            idx = _sample(len(s["points"][0]), cap)
            xs = [s["points"][0][i] for i in idx]
            ys = [s["points"][1][i] for i in idx]
            e = {"kind": s["kind"], "label": s["label"], "n_points": s["n"]}
            if s.get("pie"):
                e["labels"], e["fractions"] = xs, ys
            else:
                e["x"], e["y"] = xs, ys
            if "orientation" in s:
                e["orientation"] = s["orientation"]
            if "bin_edges" in s and len(idx) == s["n"]:
                e["bin_edges"] = [_number(v) for v in s["bin_edges"]]
            e["truncated"] = len(idx) < s["n"]
            a_trunc = a_trunc or e["truncated"]
            a["series"].append(e)
        a["truncated"] = a_trunc
        truncated = truncated or a_trunc
        out.append(a)
    return out, truncated


def describe_figure(fig):
    """The chart description of a matplotlib Figure (a dict), or None when it fails."""
    try:
        axes = _collect(fig)
        sup = getattr(fig, "_suptitle", None)
        title = _text(sup.get_text()) if sup is not None and sup.get_text() else None
        if title is None and len(axes) == 1:
            title = axes[0][0]["title"]
        kinds = [f["kind"] for f, _ in axes[:MAX_AXES] if f["kind"] != "unknown"]
        doc = {"version": VERSION, "kind": _kind_of(kinds), "title": title,
               "n_axes": len(axes), "axes": [], "truncated": False}
        for max_series in (MAX_SERIES, 5, 1):
            # a first cap from the size of the points and of the rest
            # (both measured once), so that a figure of many long series is
            # not serialised whole again and again
            doc["axes"], _ = _render(axes, 0, max_series)
            rest = _size(doc)
            if rest >= MAX_BYTES:
                continue
            doc["axes"], _ = _render(axes, MAX_POINTS, max_series)
            points = max(1, _size(doc) - rest)
            cap = max(2, min(MAX_POINTS, int(MAX_POINTS * (MAX_BYTES - rest) * 0.95 / points)))
            while True:
                doc["axes"], doc["truncated"] = _render(axes, cap, max_series)
                size = _size(doc)
                if size <= MAX_BYTES:
                    return doc
                if cap <= 2:
                    break
                # the points make most of the size: aim below the budget
                cap = max(2, min(cap - 1, int(cap * MAX_BYTES * 0.9 / size)))
        doc["axes"], doc["truncated"] = [], True
        return doc if _size(doc) <= MAX_BYTES else None
    except Exception:
        return None


# ---- tables -------------------------------------------------------------------------

def describe_table(df):
    """The table description of a pandas DataFrame (a dict), or None when it fails."""
    try:
        nrows, ncols = df.shape
        cols = list(df.columns[:MAX_COLUMNS])
        dtypes = [_text(t) for t in df.dtypes.iloc[:MAX_COLUMNS]]
        head = df.iloc[:MAX_ROWS, :MAX_COLUMNS]
        index = [_value(v) for v in head.index]
        rows = []
        for tup in head.itertuples(index=False, name=None):
            rows.append([_value(v.item() if hasattr(v, "item") and
                                not _is_datetime64(v) else v) for v in tup])
        names = [n for n in df.index.names if n is not None]
        doc = {"version": VERSION, "shape": [int(nrows), int(ncols)],
               "columns": [_text(" / ".join(map(str, c)) if isinstance(c, tuple) else c)
                           for c in cols],
               "dtypes": dtypes,
               "index_name": _text(" / ".join(map(str, names))) if names else None,
               "index": index, "rows": rows}
        cut = ncols > MAX_COLUMNS or nrows > MAX_ROWS
        for keep in ROW_STEPS:
            keep = min(keep, len(rows))
            doc["index"], doc["rows"] = index[:keep], rows[:keep]
            doc["truncated"] = cut or keep < nrows
            if _size(doc) <= MAX_BYTES:
                return doc
        return None
    except Exception:
        return None


def _is_datetime64(v):
    try:
        import numpy as np
        return isinstance(v, np.datetime64)
    except ImportError:
        return False


# ---- the extension --------------------------------------------------------------------

def _is_a(obj, module, name):
    """isinstance by the class's module and name, without importing the module."""
    for cls in type(obj).__mro__:
        if cls.__name__ == name and cls.__module__ == module:
            return True
    return False


def _formatter(mime, module, name, describe, parent):
    from IPython.core.formatters import BaseFormatter, catch_format_error
    from traitlets import Unicode

    class DescriptionFormatter(BaseFormatter):
        """Describes instances of module.name. Not through for_type: the
        inline backend's select_figure_formats pops Figure from every
        formatter whenever it is configured."""
        format_type = Unicode(mime)
        _return_type = dict

        @catch_format_error
        def __call__(self, obj):
            if not self.enabled or not _is_a(obj, module, name):
                return None
            return describe(obj)

    return DescriptionFormatter(parent=parent)


def load_ipython_extension(ip):
    df = ip.display_formatter
    df.formatters[CHART_MIME] = _formatter(CHART_MIME, "matplotlib.figure", "Figure",
                                           describe_figure, df)
    df.formatters[TABLE_MIME] = _formatter(TABLE_MIME, "pandas.core.frame", "DataFrame",
                                           describe_table, df)
