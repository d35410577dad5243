# The nbrun demo: what an agent's data analysis looks like.
# Each "# %%" starts a cell; a failing cell keeps the outputs before it.

# %%
import pandas as pd

sales = pd.read_csv("/mnt/data/sales.csv")
sales["revenue"] = sales["units"] * sales["price"]
print(f"{len(sales)} rows, {sales['month'].nunique()} months")

# %%
summary = sales.groupby("region")[["units", "revenue"]].sum()
summary.to_csv("/mnt/data/summary.csv")
summary

# %%
import matplotlib.pyplot as plt

monthly = sales.pivot(index="month", columns="region", values="revenue")
ax = monthly.plot(marker="o", figsize=(6, 3.5), title="Revenue by region")
ax.set_ylabel("revenue")
plt.tight_layout()
plt.show()
